#!/usr/bin/env bash
# The command line end to end: export, run (text, --json, --stats), inspect, tokenize, and every
# error path: a non-zero exit and one line naming the file or option.
# usage: cli_test.sh ETCH JSONQ WORKDIR
set -u
ETCH=$1 JSONQ=$2 WORK=$3
MODELS=${ETCH_MODELS_DIR:-${ETCH_DEFAULT_MODELS_DIR:-}}
S=$MODELS/stories260K
REF=$S/reference
mkdir -p "$WORK"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }

# expect_error CODE PATTERN -- command...: exit code CODE and exactly one stderr line matching PATTERN.
expect_error() {
  local code=$1 pat=$2; shift 3
  "$@" >"$WORK/out" 2>"$WORK/err"
  local rc=$? lines
  lines=$(wc -l <"$WORK/err")
  if [ "$rc" -eq "$code" ] && [ "$lines" -eq 1 ] && grep -q -- "$pat" "$WORK/err"; then ok
  else bad "expected exit $code and one line matching '$pat' from: $* (exit $rc, $lines lines: $(head -c 300 "$WORK/err"))"; fi
}

if [ ! -f "$S/stories260K.bin" ]; then
  echo "stories260K not found under '$MODELS' (set ETCH_MODELS_DIR)" >&2
  echo "0 passed, 1 failed"; exit 1
fi

# --- help
check "etch --help" "$ETCH" --help >/dev/null
for c in export run inspect tokenize; do
  check "etch $c --help" "$ETCH" "$c" --help >"$WORK/help"
  check "etch $c --help has usage" grep -q "usage: etch $c" "$WORK/help"
done
check "run --help documents -n" grep -q "N counts generated tokens only" <("$ETCH" run --help)

# --- export
P=$WORK/stories.etch PS=$WORK/stories-static.etch
check "export dynamic" "$ETCH" export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$P"
check "export static" "$ETCH" export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$PS" --static
sd=$(stat -c %s "$P") ss=$(stat -c %s "$PS")
check "static and dynamic sizes within 1% ($sd, $ss)" test $(( (sd > ss ? sd - ss : ss - sd) * 100 )) -lt "$sd"

# --- run: streamed text equals the reference, with every prefill
for mode in auto batched sequential; do
  "$ETCH" run "$P" -p "Once upon a time" -n 196 --prefill "$mode" >"$WORK/text.$mode"
  check "text ($mode) equals the reference" cmp -s "$WORK/text.$mode" "$REF/greedy_once_upon_a_time.txt"
done
"$ETCH" run "$PS" -p "" -n 200 >"$WORK/text.static"
check "static program, empty prompt, equals the reference" cmp -s "$WORK/text.static" "$REF/greedy_empty_prompt.txt"

# --- run --json: ids and text
"$ETCH" run "$P" -p "Once upon a time" -n 196 --json >"$WORK/run.json"
check "json: generated ids" test "$("$JSONQ" "$WORK/run.json" generated_ids)" = "$("$JSONQ" "$REF/greedy_ids.json" once_upon_a_time.generated_ids)"
check "json: prompt ids" test "$("$JSONQ" "$WORK/run.json" prompt_ids)" = "[1,403,407,261,378]"
check "json: prefill batched" test "$("$JSONQ" "$WORK/run.json" prefill)" = "batched"
check "json: one chunk of 5" test "$("$JSONQ" "$WORK/run.json" chunks)" = "[5]"
check "json: prompt + text equals the reference" \
  test "Once upon a time$("$JSONQ" "$WORK/run.json" text)" = "$(cat "$REF/greedy_once_upon_a_time.txt")"
check "json: stats inside" test "$("$JSONQ" "$WORK/run.json" stats.generated_tokens)" = "196"
"$ETCH" run "$P" -p "Once upon a time" -n 5 --json --prefill sequential >"$WORK/seq.json"
check "json: sequential chunks" test "$("$JSONQ" "$WORK/seq.json" chunks)" = "[1,1,1,1,1]"
check "json: sequential named" test "$("$JSONQ" "$WORK/seq.json" prefill)" = "sequential"

# --- run --stats: the PyTorchObserver line is JSON; the table follows
"$ETCH" run "$P" -p "Once upon a time" -n 20 --stats >/dev/null 2>"$WORK/stats"
grep '^PyTorchObserver {' "$WORK/stats" | sed 's/^PyTorchObserver //' >"$WORK/observer.json"
check "observer line parses" "$JSONQ" "$WORK/observer.json" first_token_ms
check "observer prompt_tokens" test "$("$JSONQ" "$WORK/observer.json" prompt_tokens)" = 5
for f in "Prompt Tokens: 5 Generated Tokens: 20" "Model Load Time:" "Total inference time:" "Prompt evaluation:" \
         "Generated 20 tokens:" "Time to first generated token:" "Sampling time over 25 tokens:"; do
  check "report has '$f'" grep -q "$f" "$WORK/stats"
done

# --- inspect
"$ETCH" inspect "$P" >"$WORK/inspect" 2>&1
check "inspect: bound" grep -q "get_max_seq_len       128" "$WORK/inspect"
check "inspect: tokens input" grep -q "tokens     int32\[1, n\]  1 <= n <= 128" "$WORK/inspect"
check "inspect: checksum ok" grep -q "checksum .* ok" "$WORK/inspect"
check "inspect: data hash ok" grep -q "data hash .* ok" "$WORK/inspect"
check "inspect: tensors" grep -q "blk.4.ffn_down.weight" "$WORK/inspect"
"$ETCH" inspect "$PS" >"$WORK/inspect.static"
check "inspect static: bound 1" grep -q "get_max_seq_len       1$" "$WORK/inspect.static"

# --- tokenize
check "tokenize" test "$("$ETCH" tokenize "$P" --bos "Once upon a time")" = "[1, 403, 407, 261, 378]"
check "tokenize --decode" test "$("$ETCH" tokenize "$P" --decode "[403, 407, 261, 378]")" = "Once upon a time"
printf 'line one\n\tline two  ' >"$WORK/in.txt"
ids=$("$ETCH" tokenize "$P" --file "$WORK/in.txt")
"$ETCH" tokenize "$P" --decode "$ids" >"$WORK/back.txt"
check "tokenize --file round trip" test "$(cat "$WORK/back.txt")" = "$(printf 'line one\n\tline two  ')"

# --- errors: exit code, one line, what and where
expect_error 2 "unknown command 'frobnicate'" -- "$ETCH" frobnicate
expect_error 2 "unknown option '--bogus'" -- "$ETCH" run "$P" -p x --bogus
expect_error 2 "unknown option '--bogus'" -- "$ETCH" export --bogus
expect_error 2 "expects an integer" -- "$ETCH" run "$P" -p x -n abc
expect_error 2 "expects an integer" -- "$ETCH" run "$P" -p x -n -5
expect_error 2 "expects a number in 0..100" -- "$ETCH" run "$P" -p x --temperature -1
expect_error 2 "expects a number" -- "$ETCH" run "$P" -p x --top-p 1.5
expect_error 2 "needs a value" -- "$ETCH" run "$P" -p
expect_error 2 "auto, batched or sequential" -- "$ETCH" run "$P" -p x --prefill fast
expect_error 2 "give the prompt with -p PROMPT" -- "$ETCH" run "$P"
expect_error 2 "exclude each other" -- "$ETCH" export --llama2c a --tokenizer b -o c --static --max-seq-len 4
expect_error 1 "missing.etch: cannot open" -- "$ETCH" run "$WORK/missing.etch" -p x
expect_error 1 "missing.bin: cannot open" -- "$ETCH" export --llama2c "$WORK/missing.bin" --tokenizer "$S/tok512.bin" -o "$WORK/x.etch"
head -c 100000 "$P" >"$WORK/trunc.etch"
expect_error 1 "trunc.etch: the file has 100000 bytes but its header says .* (truncated)" -- "$ETCH" run "$WORK/trunc.etch" -p x
expect_error 1 "trunc.etch.*truncated" -- "$ETCH" inspect "$WORK/trunc.etch"
cp "$P" "$WORK/flip.etch"; printf '\x77' | dd of="$WORK/flip.etch" bs=1 seek=200 conv=notrunc 2>/dev/null
expect_error 1 "flip.etch: checksum mismatch" -- "$ETCH" inspect "$WORK/flip.etch"
cp "$P" "$WORK/flipdata.etch"; printf '\x77' | dd of="$WORK/flipdata.etch" bs=1 seek=$((sd - 100)) conv=notrunc 2>/dev/null
expect_error 1 "flipdata.etch: tensor data hash mismatch" -- "$ETCH" inspect "$WORK/flipdata.etch"
expect_error 1 "not an etch program" -- "$ETCH" run "$S/stories260K.bin" -p x
expect_error 1 "invalid-dir/x.etch: cannot write" -- "$ETCH" export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$WORK/invalid-dir/x.etch"
check "no partial output" test ! -e "$WORK/invalid-dir/x.etch"
# Outputs are written whole or not at all, through a temporary no one else holds (new-user issue, 2).
EXP=(export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin")
expect_error 1 "/dev/null exists and is not a regular file (a device)" -- "$ETCH" "${EXP[@]}" -o /dev/null
check "/dev/null is still a device" test -c /dev/null
mkdir -p "$WORK/adir"
expect_error 1 "adir exists and is not a regular file (a folder)" -- "$ETCH" "${EXP[@]}" -o "$WORK/adir"
echo "mine" >"$WORK/own.etch.tmp"
check "export beside a user's PATH.tmp" "$ETCH" "${EXP[@]}" -o "$WORK/own.etch"
check "the user's PATH.tmp is untouched" test "$(cat "$WORK/own.etch.tmp")" = mine
check "no temporary left behind" test -z "$(ls -A "$WORK" | grep '^\.own\.etch\.')"
cp "$P" "$WORK/target.etch"; ln -sf target.etch "$WORK/link.etch"
check "export through a symlink" "$ETCH" "${EXP[@]}" -o "$WORK/link.etch" --max-context-len 64
check "the link stays a link" test -L "$WORK/link.etch"
check "its target was written" test "$("$ETCH" inspect "$WORK/target.etch" | grep -c 'max_context_len.*64')" -ge 1
cp "$P" "$WORK/keep.etch"; before=$(md5sum <"$WORK/keep.etch")
expect_error 2 "dtype" -- "$ETCH" "${EXP[@]}" -o "$WORK/keep.etch" --dtype f8
check "a failed export leaves the old file as it was" test "$(md5sum <"$WORK/keep.etch")" = "$before"
"$ETCH" export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$WORK/ctx8.etch" --max-context-len 8 2>/dev/null
expect_error 1 "prompt has .* tokens but the context holds 8" -- "$ETCH" run "$WORK/ctx8.etch" -p "Once upon a time, there was a little girl named Lily."
expect_error 1 "not valid UTF-8: bad byte 0xff at offset 3" -- "$ETCH" run "$P" -p $'abc\xff'
expect_error 1 "outside the vocabulary" -- "$ETCH" tokenize "$P" --decode "[1, 9999]"

# --- Hugging Face and GGUF sources, synth
TOKS=${ETCH_TOKENIZERS_DIR:-$MODELS/../tokenizers}
check "synth gguf" "$ETCH" synth --arch qwen3 --tokenizer "$TOKS/qwen3/tokenizer.json" --format gguf --seed 3 -o "$WORK/q.gguf"
check "synth is deterministic" "$ETCH" synth --arch qwen3 --tokenizer "$TOKS/qwen3/tokenizer.json" --format gguf --seed 3 -o "$WORK/q2.gguf"
check "same seed, same bytes" cmp -s "$WORK/q.gguf" "$WORK/q2.gguf"
check "synth hf" "$ETCH" synth --arch llama --tokenizer "$TOKS/mistral/tokenizer.json" --format hf --dtype bf16 --seed 3 -o "$WORK/l-hf"
check "export --gguf" "$ETCH" export --gguf "$WORK/q.gguf" -o "$WORK/q.etch" --dtype f16
check "export --hf" "$ETCH" export --hf "$WORK/l-hf" -o "$WORK/l.etch" --static
check "tokenize a GGUF" test "$("$ETCH" tokenize "$WORK/q.gguf" "Hello world")" = "[9707, 1879]"
check "tokenize tokenizer.json" test "$("$ETCH" tokenize "$TOKS/mistral/tokenizer.json" --bos "Hello world")" = "[1, 22557, 1526]"
printf '["a", "<|im_end|>b", "\\u0000z"]' >"$WORK/batch.json"
check "tokenize --batch" test "$("$ETCH" tokenize "$WORK/q.etch" --batch "$WORK/batch.json")" = "[[64],[151645, 65],[188, 89]]"
"$ETCH" inspect "$WORK/q.etch" >"$WORK/inspect.q"
check "inspect shows qk_norm and f16" grep -q "qk_norm: 1" "$WORK/inspect.q"
check "inspect shows f16 tensors" grep -q "blk.0.attn_q.weight .* f16" "$WORK/inspect.q"
check "inspect names the matrices' type" grep -q "weight matrices: f16 100%" "$WORK/inspect.q"
check "chat run" "$ETCH" run "$WORK/q.etch" --chat --system S -p "Hi" -n 2
# A session is resident for the positions it used, not for its whole cache: 512 MiB of KV cache
# whose heads' rows (16,384 positions x 64 values x 2 bytes) are one 2 MiB block each, which 2 MiB
# pages would make resident (zeroed) at the first token.
"$ETCH" synth --arch qwen3 --tokenizer "$TOKS/qwen3/tokenizer.json" --format gguf --layers 4 --dim 256 --hidden-dim 512 \
  --heads 32 --kv-heads 32 --head-dim 64 --context-len 16384 --seed 5 -o "$WORK/kv.gguf" >/dev/null
"$ETCH" export --gguf "$WORK/kv.gguf" -o "$WORK/kv.etch" --dtype f16 --kv-type f16 --max-context-len 16384 2>/dev/null
"$ETCH" bench "$WORK/kv.etch" -p 8 -n 2 -t 2 -r 1 --no-roofline --no-sequential -o json | sed -n 2p >"$WORK/kv.json"
rss=$("$JSONQ" "$WORK/kv.json" peak_rss_mb) kv=$("$JSONQ" "$WORK/kv.json" kv_cache_mb) prog=$(($(stat -c %s "$WORK/kv.etch") >> 20))
check "a session after 10 positions is resident below its program plus half its KV cache (RSS $rss MB, program $prog MB, cache $kv MB)" \
  awk -v r="$rss" -v p="$prog" -v k="$kv" 'BEGIN { exit !(k + 0 == 512 && r > 0 && r < p + k / 2) }'
# wide enough that decode's matmuls run on the pool: two threads give one thread's tokens
"$ETCH" synth --arch qwen3 --tokenizer "$TOKS/qwen3/tokenizer.json" --format gguf --layers 2 --dim 512 --hidden-dim 1024 \
  --heads 8 --kv-heads 2 --seed 5 -o "$WORK/wide.gguf" >/dev/null
"$ETCH" export --gguf "$WORK/wide.gguf" -o "$WORK/wide.etch" 2>/dev/null
for t in 1 2; do # sampled, so that logits which moved would show more often than under greedy
  "$ETCH" run "$WORK/wide.etch" -p "Hello" -n 80 --temperature 1 --seed 7 -t $t --json >"$WORK/wide-$t.json"
done
ids1=$("$JSONQ" "$WORK/wide-1.json" generated_ids) ids2=$("$JSONQ" "$WORK/wide-2.json" generated_ids)
check "decode on two threads samples one thread's 80 tokens" test "$(tr -cd , <<<"$ids1" | wc -c)" = 79 -a "$ids1" = "$ids2"
# a Q8_0 GGUF kept as it is: by default for int8 activations per 32 values (as llama.cpp runs it), the
# same program as keeping f32 activations and converting with `quantize --scheme 8da8w --act-group 32`;
# converted per token, quantize says nothing was rounded again
"$ETCH" synth --arch qwen3 --tokenizer "$TOKS/qwen3/tokenizer.json" --format gguf --dtype q8_0 --seed 3 -o "$WORK/q8.gguf"
"$ETCH" export --gguf "$WORK/q8.gguf" -o "$WORK/q8-int8.etch" 2>"$WORK/q8-int8-export.log"
check "export says activations are int8 by default" grep -q "activations are rounded to int8 per 32 values" "$WORK/q8-int8-export.log"
"$ETCH" inspect "$WORK/q8-int8.etch" --no-verify-data >"$WORK/q8-int8.inspect"
check "the default export's matrices are i8" grep -q "weight matrices: i8 100%" "$WORK/q8-int8.inspect"
"$ETCH" export --gguf "$WORK/q8.gguf" -o "$WORK/q8.etch" --activations f32 2>"$WORK/q8-export.log"
check "export --activations f32 names the default it left" grep -q "they keep f32 activations.*--activations int8" "$WORK/q8-export.log"
"$ETCH" quantize "$WORK/q8.etch" -o "$WORK/q8-8da8w-g32.etch" --scheme 8da8w --act-group 32 2>/dev/null
for p in q8-int8 q8-8da8w-g32; do "$ETCH" run "$WORK/$p.etch" -p "Hello there" -n 12 --json >"$WORK/$p.json"; done
check "the default export runs as 8da8w --act-group 32 (12 tokens)" test "$("$JSONQ" "$WORK/q8-int8.json" generated_ids)" = \
  "$("$JSONQ" "$WORK/q8-8da8w-g32.json" generated_ids)" -a "$(tr -cd , <<<"$("$JSONQ" "$WORK/q8-int8.json" generated_ids)" | wc -c)" = 11
"$ETCH" quantize "$WORK/q8.etch" -o "$WORK/q8-8da8w.etch" --scheme 8da8w 2>"$WORK/q8-8da8w.log"
check "quantize says which matrices kept their values" grep -q "matrices converted as they were, nothing rounded again; 0 rounded" "$WORK/q8-8da8w.log"
expect_error 2 "--activations expects int8 or f32" -- "$ETCH" export --gguf "$WORK/q8.gguf" -o "$WORK/x.etch" --activations f16
expect_error 1 "int8 activations go with a GGUF's block types kept as they are" -- "$ETCH" export --gguf "$WORK/q8.gguf" \
  -o "$WORK/x.etch" --activations int8 --dtype f32
check "no program is left by the refused exports" test ! -e "$WORK/x.etch"
expect_error 1 "already i8: .*a GGUF exported with --activations f32" -- "$ETCH" quantize "$WORK/q8-int8.etch" -o "$WORK/x.etch" \
  --scheme 8da8w
# GGUF types with mins (Q4_K into q4, Q5_1 into q8) are kept with them. To the integer-dot scheme of
# their width they convert as they are, mins and all: closer to the file than rounding its weights
# again (as quantize does the same weights dequantized to f32). To a weight-only scheme their weights
# are rounded exactly as those f32 weights are: the same logits (KL 0).
kl() { sed -n 's/.*KL(reference || program): mean \([0-9.e+-]*\),.*/\1/p' "$1"; }
for t in q4_k:8da4w:4w:4w q5_1:8da8w:8w:8w; do
  IFS=: read -r q scheme wonly table <<<"$t"
  "$ETCH" synth --arch qwen3 --tokenizer "$TOKS/qwen3/tokenizer.json" --format gguf --dtype $q --layers 2 --dim 256 \
    --hidden-dim 512 --heads 4 --kv-heads 2 --seed 3 -o "$WORK/$q.gguf" >/dev/null
  "$ETCH" export --gguf "$WORK/$q.gguf" -o "$WORK/$q.etch" --activations f32 2>/dev/null
  "$ETCH" export --gguf "$WORK/$q.gguf" -o "$WORK/$q-f32.etch" --dtype f32 2>/dev/null
  "$ETCH" inspect "$WORK/$q.etch" --no-verify-data >"$WORK/$q.inspect"
  check "$q is kept with its mins" grep -q "blk.0.ffn_up.weight.min .* \[512, 8\]" "$WORK/$q.inspect"
  for s in $scheme $wonly; do
    "$ETCH" quantize "$WORK/$q.etch" -o "$WORK/$q-$s.etch" --scheme $s --qembedding $table 2>"$WORK/$q-$s.log"
    "$ETCH" quantize "$WORK/$q-f32.etch" -o "$WORK/$q-f32-$s.etch" --scheme $s --qembedding $table 2>/dev/null
    "$ETCH" eval "$WORK/$q-$s.etch" --text "$(dirname "$0")/data/heldout.txt" --ctx 64 --ref "$WORK/$q.etch" >"$WORK/$q-$s.eval" 2>&1
    "$ETCH" eval "$WORK/$q-f32-$s.etch" --text "$(dirname "$0")/data/heldout.txt" --ctx 64 --ref "$WORK/$q.etch" >"$WORK/$q-f32-$s.eval" 2>&1
  done
  "$ETCH" inspect "$WORK/$q-$scheme.etch" --no-verify-data >"$WORK/$q-$scheme.inspect"
  check "$q to $scheme keeps the mins" grep -q "blk.0.ffn_up.weight.min .* \[512, 8\]" "$WORK/$q-$scheme.inspect"
  check "inspect names the kept matrices' types ($q)" grep -q "weight matrices: q[48] [0-9]*%" "$WORK/$q.inspect"
  check "inspect names the converted matrices' types ($scheme)" grep -q "weight matrices: i[48] [0-9]*%" "$WORK/$q-$scheme.inspect"
  check "$q to $scheme says so" grep -q "converted as they were, nothing rounded again; 0 rounded" "$WORK/$q-$scheme.log"
  a=$(kl "$WORK/$q-$scheme.eval") b=$(kl "$WORK/$q-f32-$scheme.eval")
  check "$q to $scheme as it is (KL $a) is closer than rounded again ($b)" awk -v a="$a" -v b="$b" 'BEGIN { exit !(a != "" && b != "" && a < b) }'
  a=$(kl "$WORK/$q-$wonly.eval") b=$(kl "$WORK/$q-f32-$wonly.eval")
  check "$q to $wonly rounds what f32 rounds (KL $a, $b)" test -n "$a" -a "$a" = "$b"
  # with a scale per 32 inputs (as llama.cpp quantizes activations) it is closer to the file still
  "$ETCH" quantize "$WORK/$q.etch" -o "$WORK/$q-$scheme-g32.etch" --scheme $scheme --act-group 32 --qembedding $table 2>/dev/null
  "$ETCH" eval "$WORK/$q-$scheme-g32.etch" --text "$(dirname "$0")/data/heldout.txt" --ctx 64 --ref "$WORK/$q.etch" >"$WORK/$q-$scheme-g32.eval" 2>&1
  a=$(kl "$WORK/$q-$scheme-g32.eval") b=$(kl "$WORK/$q-$scheme.eval")
  check "$q to $scheme with activations per 32 (KL $a) is closer than per token ($b)" awk -v a="$a" -v b="$b" 'BEGIN { exit !(a != "" && b != "" && a < b) }'
done
expect_error 2 "give one source" -- "$ETCH" export --hf a --gguf b -o c
expect_error 2 "--tokenizer goes with --llama2c" -- "$ETCH" export --hf a --tokenizer b -o c
expect_error 2 "--dtype expects f32, f16 or bf16" -- "$ETCH" export --hf a -o c --dtype q4_0
expect_error 1 "nope: not a folder" -- "$ETCH" export --hf "$WORK/nope" -o "$WORK/x.etch"
expect_error 1 "not a GGUF file" -- "$ETCH" export --gguf "$P" -o "$WORK/x.etch"
expect_error 1 "this program has no chat template" -- "$ETCH" run "$P" --chat -p hi
expect_error 2 "go with --chat" -- "$ETCH" run "$P" --system hi -p hi
expect_error 1 "--think/--no-think need the qwen3 template" -- "$ETCH" run "$WORK/q.etch" --chat --no-think --chat-template llama3 -p hi
expect_error 1 "element 1 is not a valid JSON string" -- "$ETCH" tokenize "$WORK/q.etch" --batch <(printf '["a", 5]')
expect_error 1 "arch 'gpt2' is not one of" -- "$ETCH" synth --arch gpt2 --tokenizer "$TOKS/qwen3/tokenizer.json" --format hf -o "$WORK/g"
expect_error 1 "dtype 'q4_0' is not supported for hf" -- "$ETCH" synth --arch llama --tokenizer "$TOKS/qwen3/tokenizer.json" --format hf --dtype q4_0 -o "$WORK/g"
expect_error 1 "only gemma3 takes one" -- "$ETCH" synth --arch llama --tokenizer "$TOKS/qwen3/tokenizer.json" --format hf --sliding-window 8 -o "$WORK/g"
expect_error 2 "expects an integer" -- "$ETCH" synth --arch gemma3 --tokenizer "$TOKS/qwen3/tokenizer.json" --format hf --sliding-window 0 -o "$WORK/g"

# --- run: prompts from stdin and files, models run directly, Ctrl-C, full context, checks before echo
check "-p - reads standard input" cmp -s <(printf 'Once upon a time' | "$ETCH" run "$P" -p - -n 196) "$REF/greedy_once_upon_a_time.txt"
printf 'Once upon a time' >"$WORK/prompt.txt"
check "-f FILE" cmp -s <("$ETCH" run "$P" -f "$WORK/prompt.txt" -n 196) "$REF/greedy_once_upon_a_time.txt"
export ETCH_CACHE_DIR=$WORK/cache; rm -rf "$ETCH_CACHE_DIR"
"$ETCH" run "$WORK/q.gguf" -p "Hello" -n 3 --json >"$WORK/direct.json" 2>"$WORK/direct.err"
check "run a GGUF directly: exported once into the cache" grep -q "exported .*q.gguf into the cache" "$WORK/direct.err"
check "... and it generates" test "$("$JSONQ" "$WORK/direct.json" stats.generated_tokens)" = 3
"$ETCH" export --gguf "$WORK/q.gguf" -o "$WORK/q-default.etch" 2>/dev/null
"$ETCH" run "$WORK/q-default.etch" -p "Hello" -n 3 --json >"$WORK/direct-ref.json"
check "... the same tokens as its exported program" test "$("$JSONQ" "$WORK/direct.json" generated_ids)" = "$("$JSONQ" "$WORK/direct-ref.json" generated_ids)"
"$ETCH" run "$WORK/q.gguf" -p "Hello" -n 3 >/dev/null 2>"$WORK/direct2.err"
check "the second run reuses the cache" test ! -s "$WORK/direct2.err"
check "run a Hugging Face folder directly" "$ETCH" run "$WORK/l-hf" -p "Hello" -n 2
touch -d '2001-01-01' "$WORK/q.gguf"
"$ETCH" run "$WORK/q.gguf" -p "Hello" -n 1 >/dev/null 2>"$WORK/direct3.err"
check "a changed source is exported again" grep -q "exported" "$WORK/direct3.err"
unset ETCH_CACHE_DIR
expect_error 1 "not valid UTF-8" -- "$ETCH" run "$P" -p $'abc\xff'
check "an invalid prompt is not echoed" test ! -s "$WORK/out"
"$ETCH" run "$WORK/ctx8.etch" -p "Once" -n 20 >/dev/null 2>"$WORK/full.err"
check "a full context says so" grep -q "the context is full (8 positions)" "$WORK/full.err"
# Ctrl-C: a model slow enough to interrupt (23M parameters, 4096 positions, one thread, sequential)
"$ETCH" synth --arch llama --tokenizer "$TOKS/mistral/tokenizer.json" --format hf --dim 256 --hidden-dim 768 \
  --layers 8 --heads 4 --kv-heads 4 --context-len 4096 --seed 5 -o "$WORK/slow-hf" >/dev/null
"$ETCH" export --hf "$WORK/slow-hf" -o "$WORK/slow.etch" >/dev/null 2>&1
"$ETCH" run "$WORK/slow.etch" -p "Hello" -n 4000 -t 1 --json --stats >"$WORK/int.json" 2>"$WORK/int.err" &
pid=$!; sleep 1.5; kill -INT $pid; wait $pid; rc=$?
check "Ctrl-C exits 130 (got $rc)" test "$rc" -eq 130
check "Ctrl-C: the JSON is whole, stop_reason interrupted" test "$("$JSONQ" "$WORK/int.json" stop_reason)" = interrupted
check "Ctrl-C: what was generated is there" test "$("$JSONQ" "$WORK/int.json" stats.generated_tokens)" -gt 0
check "Ctrl-C: the stats are printed" grep -q "PyTorchObserver" "$WORK/int.err"
check "Ctrl-C: says interrupted" grep -q "interrupted" "$WORK/int.err"
"$ETCH" bench "$WORK/slow.etch" -p 8,4000 -n 4 -t 1 -r 1 --no-roofline -o json >"$WORK/bint.json" 2>"$WORK/bint.err" &
pid=$!; sleep 2; kill -INT $pid; wait $pid; rc=$?
check "bench Ctrl-C exits 130 (got $rc)" test "$rc" -eq 130
check "bench Ctrl-C: the cases measured, as a whole JSON array" test "$("$JSONQ" "$WORK/bint.json" 0.n_prompt)" = 8
check "bench Ctrl-C: says so" grep -q "interrupted after 1 case" "$WORK/bint.err"
for i in $(seq 200); do cat "$(dirname "$0")/data/story.txt"; done >"$WORK/long.txt"
# Interrupted before its first window, eval says so and prints no figures; the first window takes
# seconds under the sanitizers on a slow machine, so wait longer until one was scored.
for wait_s in 2 4 8 16 32; do
  "$ETCH" eval "$WORK/slow.etch" --text "$WORK/long.txt" --ctx 64 -t 1 --json >"$WORK/eint.json" 2>"$WORK/eint.err" &
  pid=$!; sleep $wait_s; kill -INT $pid; wait $pid; rc=$?
  grep -q "interrupted before the first window was scored" "$WORK/eint.err" || break
  check "eval Ctrl-C before a window: exits 130, no figures (got $rc)" test "$rc" -eq 130 -a ! -s "$WORK/eint.json"
done
check "eval Ctrl-C exits 130 (got $rc)" test "$rc" -eq 130
check "eval Ctrl-C: the windows scored so far" test "$("$JSONQ" "$WORK/eint.json" windows)" -gt 0
check "eval Ctrl-C: says so" grep -q "interrupted: the figures cover" "$WORK/eint.err"

# --- small rough edges
check "tokenize --decode takes ids as separate arguments" test "$("$ETCH" tokenize "$P" --decode 403 407)" = "Once upon"
expect_error 2 "one TEXT only" -- "$ETCH" tokenize "$P" two words
"$ETCH" export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$WORK/long.etch" --max-context-len 1024 2>"$WORK/long.err"
check "export warns past the trained context" grep -q "past the 512 positions the model was trained on" "$WORK/long.err"
"$ETCH" >"$WORK/bare.out" 2>"$WORK/bare.err"; rc=$?
check "bare etch: usage on stderr, exit 2" test "$rc" -eq 2 -a ! -s "$WORK/bare.out" -a -s "$WORK/bare.err"
check "--help lists quantize" grep -q "quantize" <("$ETCH" --help)

# --- etch chat: through a pseudo-terminal (script), two turns, /stats, Ctrl-D
printf 'Hello\nHow are you?\n/stats\n' | ETCH_CACHE_DIR=$WORK/cache script -qefc "'$ETCH' chat '$WORK/q.gguf' -n 6" /dev/null >"$WORK/chat.tty" 2>&1
check "chat on a terminal: two prompts answered" test "$(grep -c '^> ' "$WORK/chat.tty")" -ge 3
check "chat: the second turn reused the first from the cache" grep -q '"reused_tokens": [1-9]' "$WORK/chat.tty"
printf 'Hello\nHow are you?\n' | ETCH_CACHE_DIR=$WORK/cache "$ETCH" chat "$WORK/q.gguf" -n 5 --stop $'\n' >"$WORK/chat.out"
check "chat from a pipe: an answer a line (a newline ends an answer here)" test "$(wc -l <"$WORK/chat.out")" -eq 2
"$ETCH" run "$P" -p "Once upon a time" -n 196 --stop "Lily" >"$WORK/stop.txt"
check "run --stop: the text ends before the stop string" test "$(cat "$WORK/stop.txt")" = "Once upon a time, there was a little girl named "

# --- bench: lists, strict numbers, formats
"$ETCH" bench "$P" -p 16 -n 4,8 -t 1 -r 1 --no-roofline -o csv >"$WORK/bench.csv"
check "bench -n takes a list; csv has a header and a row per case" test "$(wc -l <"$WORK/bench.csv")" -eq 3
check "bench csv: the n_gen column" test "$(cut -d, -f2 "$WORK/bench.csv" | tr '\n' ' ')" = "n_gen 4 8 "
"$ETCH" bench "$P" -p 16 -n 4 -t 1 -r 1 --no-roofline -o json >"$WORK/bench-arr.json"
check "bench -o json: an array" test "$("$JSONQ" "$WORK/bench-arr.json" 0.n_gen)" = 4
check "bench --no-roofline: no peak" test "$("$JSONQ" "$WORK/bench-arr.json" 0.fma_peak_gflops)" = null
"$ETCH" bench --roofline -t 1 >"$WORK/roof.txt" && "$ETCH" bench --roofline >>"$WORK/roof.txt"
check "bench --roofline: the threads it measured with, named (not 0 for the default)" \
  test "$(cut -d: -f1 "$WORK/roof.txt" | tr '\n' '|')" = "machine, 1 thread|machine, one thread per physical core|"
expect_error 2 "-n expects up to 16 comma-separated integers" -- "$ETCH" bench "$P" -n 16abc
expect_error 2 "-r expects an integer in 1..1000, got '1x'" -- "$ETCH" bench "$P" -r 1x
expect_error 2 "-o expects md, csv, json or jsonl" -- "$ETCH" bench "$P" -o xml
"$ETCH" bench "$P" -p 16 -n 4 -r 1 >"$WORK/bench.md"
check "bench: no '0 thread(s)' without -t" test "$(grep -c '0 thread' "$WORK/bench.md")" -eq 0
check "bench: the table's header" grep -q "^| threads | prompt | gen | prefill tok/s" "$WORK/bench.md"
# The ceiling of seq/batched puts sequential prefill at the read bandwidth against batched at the FMA
# peak, so ceiling x bandwidth / peak is the bytes the sequential calls read per flop of the batched
# one: 4 / 2 for f32 weights, a little more for the norms, a little less for attention's flops.
"$ETCH" bench "$P" -p 16 -n 4 -t 1 -r 1 --no-sequential -o json >"$WORK/bench-ceil.json"
bpf=$(awk -v c="$("$JSONQ" "$WORK/bench-ceil.json" 0.ttft_ratio_ceiling)" -v bw="$("$JSONQ" "$WORK/bench-ceil.json" 0.read_bw_gbps)" \
  -v pk="$("$JSONQ" "$WORK/bench-ceil.json" 0.fma_peak_gflops)" 'BEGIN { printf "%.3f", c * bw / pk }')
check "bench: the ceiling of seq/batched, 2 bytes per flop for f32 weights (got $bpf)" awk "BEGIN { exit !($bpf > 1.9 && $bpf < 2.05) }"
check "bench: the ceiling in the table" grep -q "| seq/batched | ceiling |" "$WORK/bench.md"
check "bench --no-roofline: no ceiling" test "$("$JSONQ" "$WORK/bench-arr.json" 0.ttft_ratio_ceiling)" = null
"$ETCH" bench "$WORK/q8-8da8w.etch" -p 16 -n 4 -t 1 -r 1 --no-sequential -o json >"$WORK/bench-int.json"
check "bench: no ceiling where int8 activations carry prefill past the FMA peak" \
  test "$("$JSONQ" "$WORK/bench-int.json" 0.ttft_ratio_ceiling)" = null
expect_error 2 "--ctx expects an integer" -- "$ETCH" eval "$P" --text "$WORK/prompt.txt" --ctx 1
expect_error 2 "etch eval: unknown option" -- "$ETCH" eval "$P" --bogus

# --- threads and bench
check "run -t 2 gives the reference text" cmp -s <("$ETCH" run "$P" -p "Once upon a time" -n 196 -t 2) "$REF/greedy_once_upon_a_time.txt"
"$ETCH" bench "$P" -p 16,48 -n 4 -t 1,2 -r 1 --json >"$WORK/bench.json"
check "bench: one JSON line per case" test "$(wc -l <"$WORK/bench.json")" -eq 4
for key in n_prompt n_gen threads prefill_tok_s decode_tok_s ttft_batched_ms ttft_sequential_ms ttft_new_session_ms load_ms peak_rss_mb; do
  check "bench JSON has $key" "$JSONQ" <(sed -n 4p "$WORK/bench.json") "$key"
done
check "bench: a new session's first token took some time" awk "BEGIN { exit !($("$JSONQ" <(sed -n 4p "$WORK/bench.json") ttft_new_session_ms) > 0) }"
check "bench: last case is 48 tokens, 2 threads" test "$("$JSONQ" <(sed -n 4p "$WORK/bench.json") n_prompt)/$("$JSONQ" <(sed -n 4p "$WORK/bench.json") threads)" = "48/2"
check "bench table" "$ETCH" bench "$P" -p 8 -n 2 -t 1 -r 1
expect_error 2 "-p expects up to 16 comma-separated integers in 1..1048576, got 'abc'" -- "$ETCH" bench "$P" -p abc
expect_error 2 "expects an integer in 1..256" -- "$ETCH" run "$P" -p x -t 0

# --- eval: perplexity, and divergence from a reference (the same program: none; bf16 weights: a little)
STORY=$(dirname "$0")/data/story.txt
P16=$WORK/stories-bf16.etch
"$ETCH" export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$P16" --dtype bf16 2>/dev/null
"$ETCH" eval "$P" --text "$STORY" --ctx 64 --ref "$P" --json >"$WORK/eval-self.json"
"$ETCH" eval "$P16" --text "$STORY" --ctx 64 --ref "$P" --json >"$WORK/eval-bf16.json"
for key in tokens perplexity ref_perplexity kl_mean kl_p99 top1_agreement; do
  check "eval JSON has $key" "$JSONQ" "$WORK/eval-bf16.json" "$key"
done
check "eval: 310 tokens scored" test "$("$JSONQ" "$WORK/eval-self.json" tokens)" = 310
check "eval against itself: KL 0, top-1 1" test "$("$JSONQ" "$WORK/eval-self.json" kl_mean)/$("$JSONQ" "$WORK/eval-self.json" top1_agreement)" = "0/1"
check "eval against itself: the same perplexity" test "$("$JSONQ" "$WORK/eval-self.json" perplexity)" = "$("$JSONQ" "$WORK/eval-self.json" ref_perplexity)"
# KV cache types: an f16 cache against an f32 one is nearly free, an int8 one costs more, both small
"$ETCH" eval "$P" --text "$STORY" --ctx 64 --ref "$P" --kv-type f16 --ref-kv-type f32 --json >"$WORK/eval-kvf16.json"
"$ETCH" eval "$P" --text "$STORY" --ctx 64 --ref "$P" --kv-type q8 --ref-kv-type f32 --json >"$WORK/eval-kvq8.json"
kl16=$("$JSONQ" "$WORK/eval-kvf16.json" kl_mean) kl8=$("$JSONQ" "$WORK/eval-kvq8.json" kl_mean)
check "eval: f16 KV cache KL $kl16 < q8's $kl8 < 0.01" python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(not (0 <= a < b < 0.01))" "$kl16" "$kl8"
expect_error 2 "kv-type expects f32, f16 or q8, got 'q4'" -- "$ETCH" run "$P" -p hi --kv-type q4
check "bench says the KV type" grep -q "KV cache per session: .* MiB, q8" <("$ETCH" bench "$P" -p 8 -n 2 -r 1 --kv-type q8 --no-sequential)
check "eval: stories260K's perplexity on a story is low" awk -v p="$("$JSONQ" "$WORK/eval-self.json" perplexity)" 'BEGIN { exit !(p > 1 && p < 6) }'
check "eval bf16: a small KL, most top-1 agree" awk -v k="$("$JSONQ" "$WORK/eval-bf16.json" kl_mean)" -v t="$("$JSONQ" "$WORK/eval-bf16.json" top1_agreement)" 'BEGIN { exit !(k > 0 && k < 0.01 && t > 0.95) }'
check "eval table" "$ETCH" eval "$P" --text "$STORY" --ctx 64
expect_error 2 "are required" -- "$ETCH" eval "$P"
expect_error 2 "expects an integer in 2.." -- "$ETCH" eval "$P" --text "$STORY" --ctx 1
expect_error 1 "nothing.txt: cannot open" -- "$ETCH" eval "$P" --text "$WORK/nothing.txt"
expect_error 1 "fewer than one window" -- "$ETCH" eval "$P" --text <(printf 'Once upon a time') --ctx 64
expect_error 1 "different vocabularies" -- "$ETCH" eval "$P" --text "$STORY" --ref "$WORK/q.etch"

# quantize: each scheme writes a program that runs, batched equal to sequential; a8w8 calibrates
# and reports; errors name what is wrong. 8da8w-g32 and 8da4w-g32: activations with a scale per 32
# values (--act-group), the weights rounded in groups that divide 32 (stories260K's 172 columns: 4).
for scheme in 8w 4w 8da8w 8da4w 8da8w-g32 8da4w-g32; do
  opts=(--scheme "${scheme%-g32}")
  [ "$scheme" = "${scheme%-g32}" ] || opts+=(--act-group 32)
  check "quantize $scheme" "$ETCH" quantize "$P" -o "$WORK/q-$scheme.etch" "${opts[@]}" --qembedding 8w
  "$ETCH" run "$WORK/q-$scheme.etch" -p "Once upon a time" -n 24 --json >"$WORK/q-$scheme-b.json"
  "$ETCH" run "$WORK/q-$scheme.etch" -p "Once upon a time" -n 24 --json --prefill sequential >"$WORK/q-$scheme-s.json"
  check "$scheme: batched and sequential give the same tokens" test "$("$JSONQ" "$WORK/q-$scheme-b.json" generated_ids)" = "$("$JSONQ" "$WORK/q-$scheme-s.json" generated_ids)"
  # every kernel variant this CPU can run (VNNI where it has it, AVX-512 without VBMI, AVX2, the portable
  # twins) gives the same tokens
  for k in avx512+vnni avx2 portable; do
    ETCH_KERNELS=$k "$ETCH" run "$WORK/q-$scheme.etch" -p "Once upon a time" -n 24 --json >"$WORK/q-$scheme-$k.json"
    check "$scheme: ETCH_KERNELS=$k gives the same tokens" test "$("$JSONQ" "$WORK/q-$scheme-b.json" generated_ids)" = "$("$JSONQ" "$WORK/q-$scheme-$k.json" generated_ids)"
  done
done
"$ETCH" quantize "$P" -o "$WORK/q-a8w8.etch" --scheme a8w8 --calib "$STORY" --observer moving-average 2>"$WORK/q-a8w8.log"
check "a8w8: ranges per layer input" grep -q "layer 0    q/k/v in     observed \[" "$WORK/q-a8w8.log"
check "a8w8: tokens observed" grep -q "calibrated on 2 samples: 694 tokens observed (0 generated" "$WORK/q-a8w8.log"
check "a8w8: the missing special token named" grep -q "never contains these special tokens.*: </s>$" "$WORK/q-a8w8.log"
check "a8w8: no progress bar when stderr is not a terminal" test "$(grep -c 'calibrating \[' "$WORK/q-a8w8.log")" = 0
"$ETCH" eval "$WORK/q-8w.etch" --text "$STORY" --ctx 64 --ref "$P" --json >"$WORK/eval-8w.json"
check "eval 8w: a small KL" awk -v k="$("$JSONQ" "$WORK/eval-8w.json" kl_mean)" 'BEGIN { exit !(k > 0 && k < 0.005) }'
expect_error 2 "--scheme 8w|4w|8da8w|8da4w|a8w8 is required" -- "$ETCH" quantize "$P" -o "$WORK/x.etch"
expect_error 2 "--scheme expects 8w, 4w, 8da8w, 8da4w or a8w8, got '2w'" -- "$ETCH" quantize "$P" -o "$WORK/x.etch" --scheme 2w
expect_error 2 "a8w8 needs calibration samples" -- "$ETCH" quantize "$P" -o "$WORK/x.etch" --scheme a8w8
expect_error 2 "only a8w8 has them" -- "$ETCH" quantize "$P" -o "$WORK/x.etch" --scheme 8w --calib "$STORY"
expect_error 2 "--observer expects" -- "$ETCH" quantize "$P" -o "$WORK/x.etch" --scheme a8w8 --calib "$STORY" --observer max
expect_error 1 "nothing.txt: cannot open" -- "$ETCH" quantize "$P" -o "$WORK/x.etch" --scheme a8w8 --calib "$WORK/nothing.txt"
expect_error 1 "already q8" -- "$ETCH" quantize "$WORK/q-8w.etch" -o "$WORK/x.etch" --scheme 4w
expect_error 1 "activation group 32: it takes an even size up to 32768 under 8da8w or 8da4w (scheme 4w)" -- \
  "$ETCH" quantize "$P" -o "$WORK/x.etch" --scheme 4w --act-group 32
expect_error 1 "activation group 33" -- "$ETCH" quantize "$P" -o "$WORK/x.etch" --scheme 8da4w --act-group 33
check "inspect shows the activation group" grep -q "quant.act_group.* 32" <("$ETCH" inspect "$WORK/q-8da4w-g32.etch" --no-verify-data)
check "no file after a failed quantize" test ! -e "$WORK/x.etch"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
