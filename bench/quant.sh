#!/usr/bin/env bash
# Quantized etch beside quantized llama.cpp on the same weights and machine, in one invocation.
# The Qwen3-0.6B preset (real shapes and tokenizer, seeded random weights) is written by `etch synth`
# as F16, Q8_0 and Q4_0 GGUFs of the same weights. etch quantizes its F16 program with every scheme
# (the 8-bit ones with --qembedding 8w, the 4-bit ones with 4w: llama.cpp's GGUF quantizes the tied
# table too) and also runs the Q8_0/Q4_0 GGUFs as exported with defaults (*-default: the matrices
# kept as they are, for int8 activations per 32 values, as llama.cpp rounds them) and with
# --activations f32 (*-as-is: weight-only, the file's arithmetic exactly); 8da8w and 8da4w run
# twice, the second time with ETCH_KERNELS=avx2 (no VNNI, as on the brief's Zen 3), and the
# weight-only Q8_0/Q4_0 programs also converted as they are to 8da8w/8da4w with activations per
# token. Then ROUNDS rounds,
# each program and llama.cpp in turn. Prints medians and each figure's ratio to llama.cpp with the
# same bit width. Figures, not a test. From the repository root, after `make`:
#   bash bench/quant.sh   (THREADS=2 LENGTH=128 NGEN=32 ROUNDS=3 REPS=1 CTX=1024)
# ROUNDS=0 only writes the GGUFs and programs (under build/bench-vs-llamacpp), for bench/ab.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=$BUILD/bench-vs-llamacpp
TOK=${ETCH_TOKENIZERS_DIR:-$(dirname "${ETCH_MODELS_DIR:-$ROOT/assets/models}")/tokenizers}
THREADS=${THREADS:-2} LENGTH=${LENGTH:-128} NGEN=${NGEN:-32} ROUNDS=${ROUNDS:-3} REPS=${REPS:-1} CTX=${CTX:-1024}
NPM=${ETCH_NPM_DIR:-$BUILD/npm}
ETCH=$BUILD/etch
mkdir -p "$OUT"
bash "$ROOT/tests/conformance/npm_setup.sh" "$NPM" >/dev/null
cp "$ROOT/bench/llamacpp.mjs" "$NPM/bench_llamacpp.mjs"
for dt in f16 q8_0 q4_0; do
  g=$OUT/qwen3-0.6b-$dt.gguf
  [ -f "$g" ] || "$ETCH" synth --arch qwen3 --preset qwen3-0.6b --tokenizer "$TOK/qwen3/tokenizer.json" --format gguf \
    --dtype "$dt" --seed 1 -o "$g"
  p=$OUT/qwen3-0.6b-$dt-ctx$CTX-from-gguf.etch # weight-only where the GGUF is quantized
  [ -f "$p" ] || "$ETCH" export --gguf "$g" -o "$p" --max-context-len "$CTX" --activations f32
  [ $dt = f16 ] || [ -f "${p%.etch}-default.etch" ] || "$ETCH" export --gguf "$g" -o "${p%.etch}-default.etch" --max-context-len "$CTX"
done
F16=$OUT/qwen3-0.6b-f16-ctx$CTX-from-gguf.etch
declare -A PROG=([q8_0-as-is]=$OUT/qwen3-0.6b-q8_0-ctx$CTX-from-gguf.etch [q4_0-as-is]=$OUT/qwen3-0.6b-q4_0-ctx$CTX-from-gguf.etch)
for s in 8w 8da8w 4w 8da4w; do
  e=8w; [[ $s == *4w ]] && e=4w
  PROG[$s]=$OUT/qwen3-0.6b-$s-ctx$CTX.etch
  [ -f "${PROG[$s]}" ] || "$ETCH" quantize "$F16" -o "${PROG[$s]}" --scheme "$s" --qembedding "$e"
done
# the GGUF imports converted as they are to integer dot products (no second rounding)
PROG[q8_0-8da8w]=$OUT/qwen3-0.6b-q8_0-8da8w-ctx$CTX.etch PROG[q4_0-8da4w]=$OUT/qwen3-0.6b-q4_0-8da4w-ctx$CTX.etch
[ -f "${PROG[q8_0-8da8w]}" ] || "$ETCH" quantize "${PROG[q8_0-as-is]}" -o "${PROG[q8_0-8da8w]}" --scheme 8da8w
[ -f "${PROG[q4_0-8da4w]}" ] || "$ETCH" quantize "${PROG[q4_0-as-is]}" -o "${PROG[q4_0-8da4w]}" --scheme 8da4w
for dt in q8_0 q4_0; do PROG[$dt-default]=$OUT/qwen3-0.6b-$dt-ctx$CTX-from-gguf-default.etch; done
if [ "$ROUNDS" -eq 0 ]; then echo "ROUNDS=0: the programs are ready under $OUT"; exit 0; fi
RUNS=$OUT/runs-quant.jsonl
: >"$RUNS"
for round in $(seq 1 "$ROUNDS"); do
  for s in 8w 8da8w 8da8w-avx2 q8_0-default q8_0-as-is q8_0-8da8w 4w 8da4w 8da4w-avx2 q4_0-default q4_0-as-is q4_0-8da4w; do
    echo "round $round/$ROUNDS: etch $s" >&2
    # NAME-avx2: the same program with the kernels capped at AVX2 (no VNNI), as on a Zen 3
    caps=best; [[ $s == *-avx2 ]] && caps=avx2
    ETCH_KERNELS=$caps "$ETCH" bench "${PROG[${s%-avx2}]}" -p "$LENGTH" -n "$NGEN" -t "$THREADS" -r "$REPS" --no-sequential --json \
      | sed "s/^{/{\"impl\": \"etch\", \"program\": \"$s\", /" >>"$RUNS"
  done
  for dt in q8_0 q4_0; do
    echo "round $round/$ROUNDS: llama.cpp $dt" >&2
    node "$NPM/bench_llamacpp.mjs" "$OUT/qwen3-0.6b-$dt.gguf" "$THREADS" "$LENGTH" "$NGEN" "$REPS" \
      | sed "s/^{/{\"program\": \"$dt\", /" >>"$RUNS"
  done
done
/usr/bin/python3 - "$RUNS" <<'PY'
import json, statistics, sys
from collections import defaultdict
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = defaultdict(lambda: defaultdict(list))
for r in runs:
    for k in ("prefill_tok_s", "decode_tok_s"):
        by[(r["impl"], r["program"])][k].append(r[k])
med = {key: {k: statistics.median(v) for k, v in d.items()} for key, d in by.items()}
n = runs[0]["n_prompt"]
print(f"Qwen3-0.6B shapes, {runs[0]['threads']} threads, {n} prompt tokens; medians over {len(by[('llama.cpp', 'q8_0')]['decode_tok_s'])} alternating rounds\n")
print("| program | prefill tok/s | vs llama.cpp | decode tok/s | vs llama.cpp |")
print("|---|---|---|---|---|")
for dt, names in (("q8_0", ("8w", "8da8w", "8da8w-avx2", "q8_0-default", "q8_0-as-is", "q8_0-8da8w")),
                  ("q4_0", ("4w", "8da4w", "8da4w-avx2", "q4_0-default", "q4_0-as-is", "q4_0-8da4w"))):
    l = med[("llama.cpp", dt)]
    print(f"| llama.cpp {dt.upper()} | {l['prefill_tok_s']:.1f} | 1.00x | {l['decode_tok_s']:.2f} | 1.00x |")
    for s in names:
        e = med[("etch", s)]
        print(f"| etch {s} | {e['prefill_tok_s']:.1f} | {e['prefill_tok_s'] / l['prefill_tok_s']:.2f}x "
              f"| {e['decode_tok_s']:.2f} | {e['decode_tok_s'] / l['decode_tok_s']:.2f}x |")
PY
echo "runs: $RUNS"
