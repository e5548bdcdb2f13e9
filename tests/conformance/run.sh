#!/usr/bin/env bash
# Conformance against independent implementations. None of it is skipped: a missing dependency fails.
# usage: run.sh setup|tokenizers|models ETCH BUILD_DIR [TEST_LLAMACPP]
set -euo pipefail
what=$1 ETCH=$2 WORK=$3/conformance
here=$(cd "$(dirname "$0")" && pwd)
TOK=${ETCH_TOKENIZERS_DIR:-$(dirname "${ETCH_MODELS_DIR:-$here/../../assets/models}")/tokenizers}
NPM=${ETCH_NPM_DIR:-$3/npm}
PYENV=${ETCH_PYENV_DIR:-$3/pyenv}
mkdir -p "$WORK"
# ES modules resolve packages from their own folder, so the scripts run beside node_modules.
js() { local script=$1; shift; cp "$here/$script" "$NPM/$script"; node "$NPM/$script" "$@"; }

case "$what" in
setup)
  for f in "$TOK/qwen3/tokenizer.json" "$TOK/mistral/tokenizer.json"; do
    [ -f "$f" ] || { echo "missing $f (set ETCH_MODELS_DIR or ETCH_TOKENIZERS_DIR)"; exit 1; }
  done
  bash "$here/npm_setup.sh" "$NPM"
  bash "$here/py_setup.sh" "$PYENV"
  # Small synthetic models, 3 layers, real tokenizers, f32, the same weights as GGUF and as HF folders.
  shapes="--layers 3 --dim 128 --hidden-dim 320 --heads 4 --kv-heads 2 --std 0.125"
  "$ETCH" synth --arch qwen3 --tokenizer "$TOK/qwen3/tokenizer.json" --format gguf --seed 11 $shapes -o "$WORK/qwen3.gguf"
  "$ETCH" synth --arch qwen3 --tokenizer "$TOK/qwen3/tokenizer.json" --format hf --seed 11 $shapes -o "$WORK/qwen3-hf"
  "$ETCH" synth --arch llama --tokenizer "$TOK/mistral/tokenizer.json" --format gguf --seed 12 $shapes -o "$WORK/llama.gguf"
  "$ETCH" synth --arch llama --tokenizer "$TOK/mistral/tokenizer.json" --format hf --seed 12 $shapes -o "$WORK/llama-hf"
  # Llama 3 shapes with its rope scaling: rope_freqs.weight in the GGUF (as llama.cpp's converter
  # writes it), rope_scaling in config.json.
  "$ETCH" synth --arch llama --preset llama-3.2-1b --tokenizer "$TOK/mistral/tokenizer.json" --format gguf --seed 14 $shapes -o "$WORK/llama3.gguf"
  "$ETCH" synth --arch llama --preset llama-3.2-1b --tokenizer "$TOK/mistral/tokenizer.json" --format hf --seed 14 $shapes -o "$WORK/llama3-hf"
  # Gemma-3: six layers, five of them with a sliding window of 16 keys, one global (llama.cpp's
  # pattern); and the same weights with a window wider than any prompt, as a control.
  g3="--layers 6 --dim 128 --hidden-dim 320 --heads 4 --kv-heads 2 --std 0.125"
  "$ETCH" synth --arch gemma3 --tokenizer "$TOK/qwen3/tokenizer.json" --format gguf --seed 13 $g3 --sliding-window 16 -o "$WORK/gemma3.gguf"
  "$ETCH" synth --arch gemma3 --tokenizer "$TOK/qwen3/tokenizer.json" --format hf --seed 13 $g3 --sliding-window 16 -o "$WORK/gemma3-hf"
  "$ETCH" synth --arch gemma3 --tokenizer "$TOK/qwen3/tokenizer.json" --format gguf --seed 13 $g3 --sliding-window 4096 -o "$WORK/gemma3-nowindow.gguf"
  # Qwen3 with GGUF's block types: kept as they are, and dequantized to f32 for comparison. The
  # K-quants' super-blocks are 256 values: rows of 256 and 512 for every type.
  qshapes="--layers 3 --dim 256 --hidden-dim 512 --heads 4 --kv-heads 2 --std 0.125"
  for q in q8_0 q4_0 q4_1 q5_1 q4_k q5_k iq4_nl iq4_xs; do
    "$ETCH" synth --arch qwen3 --tokenizer "$TOK/qwen3/tokenizer.json" --format gguf --seed 11 $qshapes --dtype $q -o "$WORK/qwen3-$q.gguf"
    "$ETCH" export --gguf "$WORK/qwen3-$q.gguf" -o "$WORK/qwen3-$q-gguf.etch" --max-context-len 512 --kv-type f32 --activations f32
    "$ETCH" export --gguf "$WORK/qwen3-$q.gguf" -o "$WORK/qwen3-$q-f32.etch" --max-context-len 512 --kv-type f32 --dtype f32
    "$ETCH" export --gguf "$WORK/qwen3-$q.gguf" -o "$WORK/qwen3-$q-int8.etch" --max-context-len 512 --kv-type f32 # the default
  done
  for m in qwen3 llama llama3 gemma3; do
    "$ETCH" export --gguf "$WORK/$m.gguf" -o "$WORK/$m-gguf.etch" --max-context-len 512 --kv-type f32
    "$ETCH" export --hf "$WORK/$m-hf" -o "$WORK/$m-hf.etch" --max-context-len 512 --kv-type f32
  done
  "$ETCH" export --gguf "$WORK/gemma3-nowindow.gguf" -o "$WORK/gemma3-nowindow.etch" --max-context-len 512 --kv-type f32
  js corpus.mjs >"$WORK/corpus.json"
  echo "setup done"
  ;;
tokenizers)
  "$ETCH" tokenize "$TOK/qwen3/tokenizer.json" --batch "$WORK/corpus.json" >"$WORK/etch-qwen3.json"
  "$ETCH" tokenize "$TOK/mistral/tokenizer.json" --batch "$WORK/corpus.json" >"$WORK/etch-mistral.json"
  rc=0
  js tokenizers.mjs qwen3 "$WORK/corpus.json" "$WORK/etch-qwen3.json" || rc=1
  js tokenizers.mjs llama2 "$WORK/corpus.json" "$WORK/etch-mistral.json" || rc=1
  exit $rc
  ;;
models)
  TEST=$4
  cat >"$WORK/prompts.json" <<'P'
["Once upon a time", "The capital of France is", "def fibonacci(n):", "1, 2, 3, 4, 5,", "Привет, как дела?",
 "你好，世界", "In 2026 the weather was", "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
 "A long prompt that goes on and on so that batched prefill has more than one chunk of work to do, with commas, numbers like 12345, and words.",
 "x", "Emoji 😀 and tabs\tand newlines\n\n",
 "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair."]
P
  rc=0
  for m in qwen3 llama llama3 gemma3; do
    bos=""; [ "$m" = llama ] || [ "$m" = llama3 ] && bos="--bos"
    "$ETCH" tokenize "$WORK/$m-gguf.etch" --batch "$WORK/prompts.json" $bos >"$WORK/$m-prompts.json"
    if [ "$m" = gemma3 ]; then
      # Around the window of 16: the last prompt cut to 15, 16, 17 and 48 tokens (it has more than 64).
      /usr/bin/python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); l=p[-1]; assert len(l) > 64; p += [l[:15], l[:16], l[:17], l[:48]]; json.dump(p, open(sys.argv[1], "w"))' "$WORK/$m-prompts.json"
    fi
    js llamacpp.mjs "$WORK/$m.gguf" "$WORK/$m-prompts.json" 40 64 >"$WORK/$m-llamacpp.json"
    "$TEST" "$WORK/$m-gguf.etch" "$WORK/$m-hf.etch" "$WORK/$m-prompts.json" "$WORK/$m-llamacpp.json" 40 || rc=1
  done
  # Quantized weights as llama.cpp runs them (its activations rounded to int8: logits within 0.3 of
  # llama.cpp's; see the README's conformance table for the tokens that agree exactly).
  for q in q8_0 q4_0 q4_1 q5_1 q4_k q5_k iq4_nl iq4_xs; do
    js llamacpp.mjs "$WORK/qwen3-$q.gguf" "$WORK/qwen3-prompts.json" 40 64 >"$WORK/qwen3-$q-llamacpp.json"
    hf_tol=1e-4; case $q in q4_*) hf_tol=5e-4 ;; esac # Q4 sums whole bytes, then takes the high nibbles off (test_llamacpp.c)
    # llama.cpp rounds activations per 32 (Q8_0/Q8_1) for the 32-value types, per 256 (Q8_K) for the
    # K-quants and IQ4_XS: measured, logits within 0.27 (Q8_0, Q4_0, Q4_1), 0.28 (IQ4_NL), 0.33 (Q5_1),
    # 0.39, 0.43 and 0.48 (Q4_K, Q5_K, IQ4_XS)
    q_tol=0.3; case $q in q5_1) q_tol=0.4 ;; q4_k|q5_k|iq4_xs) q_tol=0.5 ;; esac
    "$TEST" "$WORK/qwen3-$q-gguf.etch" "$WORK/qwen3-$q-f32.etch" "$WORK/qwen3-prompts.json" "$WORK/qwen3-$q-llamacpp.json" 40 "$q_tol" "$hf_tol" || rc=1
    # export's default rounds activations to int8 per 32 values with f16 scales, as llama.cpp's Q8_0
    # blocks do for the 32-value types (it takes Q8_1 for Q4_1/Q5_1, Q8_K per 256 for the K-quants and
    # IQ4_XS): held to llama.cpp alone (the second program is itself). Where both round the same
    # (Q8_0, Q4_0, IQ4_NL) the logits meet closer: measured, near-tie gaps up to 0.073 and the last
    # position within 0.111 (Q4_0: 2e-6), against 0.2-0.27 with f32 activations. IQ4_XS, rounded per
    # 32 here and per 256 by llama.cpp, came to 0.51 against llama.cpp's AMX Xeon backend (etch's own
    # logits are the same on every CPU: its kernels equal their twin), 0.48 elsewhere
    int8_tol=$q_tol; case $q in q8_0|q4_0|iq4_nl) int8_tol=0.15 ;; iq4_xs) int8_tol=0.6 ;; esac
    "$TEST" "$WORK/qwen3-$q-int8.etch" "$WORK/qwen3-$q-int8.etch" "$WORK/qwen3-prompts.json" "$WORK/qwen3-$q-llamacpp.json" 40 "$int8_tol" 0 || rc=1
    # every weight, kept and dequantized, against llama.cpp's own Python dequantization
    "$PYENV/bin/python" "$here/dequant.py" "$ETCH" "$WORK/qwen3-$q.gguf" "$WORK/qwen3-$q-gguf.etch" "$WORK/qwen3-$q-f32.etch" || rc=1
  done
  # Control: the same weights without the window must disagree with llama.cpp on the prompts longer
  # than the window, or the window was never exercised on either side.
  if "$TEST" "$WORK/gemma3-nowindow.etch" "$WORK/gemma3-nowindow.etch" "$WORK/gemma3-prompts.json" "$WORK/gemma3-llamacpp.json" 40 >"$WORK/control.log" 2>&1; then
    echo "control: a Gemma-3 program without its window agrees with llama.cpp: the window was not exercised"; rc=1
  else
    echo "control: without its window, Gemma-3 disagrees with llama.cpp ($(tail -1 "$WORK/control.log")), as it must"
  fi
  exit $rc
  ;;
chat)
  # Jinja2 (Debian's python3-jinja2, the engine Hugging Face uses) renders the real Qwen3 template.
  cat >"$WORK/chat-cases.json" <<'P'
[{"system": null, "user": "Hi", "think": null}, {"system": null, "user": "Hi", "think": true},
 {"system": null, "user": "Hi", "think": false}, {"system": "You are terse.", "user": "Explain RoPE.", "think": null},
 {"system": "Système: réponds en français.", "user": "Ça va ? 😀\nDeux lignes.", "think": false},
 {"system": "S", "user": "multi\nline\n\nuser text with <b>tags</b> and \"quotes\"", "think": true}]
P
  /usr/bin/python3 "$here/chat_template.py" "$TOK/qwen3/tokenizer_config.json" "$WORK/chat-cases.json" >"$WORK/chat-jinja.json"
  "$4" "$WORK/qwen3-hf.etch" "$WORK/chat-cases.json" "$WORK/chat-jinja.json"
  # End to end: --chat puts the template's special tokens into the prompt ids.
  "$ETCH" run "$WORK/qwen3-hf.etch" --chat --no-think --system "Be brief." -p "Hi" -n 3 --json >"$WORK/chat-run.json"
  grep -q '"prompt_ids": \[151644, 8948, 198' "$WORK/chat-run.json" || { echo "--chat prompt ids: $(head -c 300 "$WORK/chat-run.json")"; exit 1; }
  "$ETCH" run "$WORK/qwen3-hf.etch" --chat -p "Hi" -n 1 --chat-template llama3 >/dev/null
  echo "chat: ok"
  ;;
roundtrip)
  "$4" "$WORK/corpus.json" "$WORK/qwen3-hf.etch" nfc "$WORK/llama-hf.etch" sp "$WORK/qwen3-gguf.etch" nfc "$WORK/llama-gguf.etch" sp
  ;;
*) echo "usage: run.sh setup|tokenizers|models|chat|roundtrip ETCH BUILD_DIR [TEST]"; exit 2 ;;
esac
