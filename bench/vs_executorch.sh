#!/usr/bin/env bash
# etch beside ExecuTorch on the same weights and machine, in one invocation. Not part of CI: it
# installs PyPI's executorch and optimum-executorch (with torch and transformers, ~6 GB) into a venv
# under build/, and ExecuTorch's export of Qwen3-0.6B takes 10-20 minutes per scheme (cached). It
# needs about 16 GB of disk: the venv, the f32 Hugging Face folder (2.4 GB), both exports (3.4 GB)
# and etch's programs (2.7 GB).
#   bash bench/vs_executorch.sh   (THREADS=2 LENGTHS="128 512" NGEN=32 ROUNDS=3 REPS=1 CTX=1024
#                                  SCHEMES="fp32 8da4w" VENV=build/executorch-venv)
# The weights: the Qwen3-0.6B preset of `etch synth` (real shapes and tokenizer, seeded random
# weights) as a Hugging Face folder, which both export: ExecuTorch with optimum-executorch's XNNPACK
# recipe and its custom SDPA and KV cache (fp32, and 8da4w in groups of 32 with the embedding 4w),
# etch with `etch export` (f32) and `etch quantize --scheme 8da4w --qembedding 4w`. ExecuTorch runs
# through its own C++ LLM runner (TextLLMRunner, bench/executorch_run.py), which uses the XNNPACK
# thread pool's default, one thread per core: THREADS should be the core count for a fair ratio.
# Prints medians of TTFT, prefill and decode tok/s, peak RSS (ExecuTorch's includes its Python
# process) and file size, with etch / ExecuTorch ratios, and the versions used.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=$BUILD/bench-vs-executorch
VENV=${VENV:-$BUILD/executorch-venv}
TOK=${ETCH_TOKENIZERS_DIR:-$(dirname "${ETCH_MODELS_DIR:-$ROOT/assets/models}")/tokenizers}
THREADS=${THREADS:-2} LENGTHS=${LENGTHS:-128 512} NGEN=${NGEN:-32} ROUNDS=${ROUNDS:-3} REPS=${REPS:-1} CTX=${CTX:-1024}
SCHEMES=${SCHEMES:-fp32 8da4w}
ETCH=$BUILD/etch
mkdir -p "$OUT"
if [ ! -x "$VENV/bin/optimum-cli" ]; then
  echo "installing executorch and optimum-executorch into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q executorch optimum-executorch
fi
HF=$OUT/qwen3-0.6b-hf
[ -f "$HF/model.safetensors" ] || "$ETCH" synth --arch qwen3 --preset qwen3-0.6b --tokenizer "$TOK/qwen3/tokenizer.json" \
  --format hf --dtype f32 --seed 1 -o "$HF"
declare -A PTE PROG
for s in $SCHEMES; do
  q=(); [ "$s" = 8da4w ] && q=(--qlinear 8da4w --qlinear_group_size 32 --qembedding 4w)
  PTE[$s]=$OUT/et-$s/model.pte
  if [ ! -f "${PTE[$s]}" ]; then
    echo "ExecuTorch export ($s): 10-20 minutes" >&2
    "$VENV/bin/optimum-cli" export executorch -m "$HF" --task text-generation --recipe xnnpack --use_custom_sdpa \
      --use_custom_kv_cache --max_seq_len "$CTX" "${q[@]}" -o "$OUT/et-$s" >"$OUT/export-$s.log" 2>&1 \
      || { echo "ExecuTorch export failed: $OUT/export-$s.log" >&2; exit 1; }
  fi
  PROG[$s]=$OUT/etch-$s.etch
  if [ ! -f "${PROG[$s]}" ]; then
    "$ETCH" export --hf "$HF" -o "$OUT/etch-fp32.etch" --dtype f32 --max-context-len "$CTX"
    [ "$s" = 8da4w ] && "$ETCH" quantize "$OUT/etch-fp32.etch" -o "${PROG[$s]}" --scheme 8da4w --qembedding 4w
  fi
done
RUNS=$OUT/runs.jsonl
: >"$RUNS"
for round in $(seq 1 "$ROUNDS"); do
  for s in $SCHEMES; do
    for n in $LENGTHS; do
      echo "round $round/$ROUNDS: $s, $n prompt tokens" >&2
      "$ETCH" bench "${PROG[$s]}" -p "$n" -n "$NGEN" -t "$THREADS" -r "$REPS" --no-sequential --no-roofline --json \
        | sed "s/^{/{\"impl\": \"etch\", \"scheme\": \"$s\", /" >>"$RUNS"
      # the runner prints its own progress and PyTorchObserver lines on stdout too: keep the JSON
      "$VENV/bin/python" "$ROOT/bench/executorch_run.py" "${PTE[$s]}" "$HF/tokenizer.json" "$n" "$NGEN" "$REPS" 2>/dev/null \
        | grep '^{"impl"' | sed "s/^{/{\"scheme\": \"$s\", /" >>"$RUNS"
    done
  done
done
VERSIONS=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("executorch", "optimum-executorch", "torch", "transformers")))')
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
SIZES=$(for s in $SCHEMES; do echo "$s $(stat -c %s "${PROG[$s]}") $(stat -c %s "${PTE[$s]}")"; done)
/usr/bin/python3 - "$RUNS" "$VERSIONS" "$CPU" "$SIZES" <<'PY'
import json, statistics, sys
from collections import defaultdict
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sizes = {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in sys.argv[4].splitlines()}
by = defaultdict(lambda: defaultdict(list))
for r in runs:
    for k in ("ttft_batched_ms", "prefill_tok_s", "decode_tok_s", "peak_rss_mb"):
        by[(r["impl"], r["scheme"], r["n_prompt"])][k].append(r[k])
med = {key: {k: statistics.median(v) for k, v in d.items()} for key, d in by.items()}
print(f"Qwen3-0.6B shapes (synthetic weights), {sys.argv[3]}, etch {runs[0].get('threads', '?')} threads, "
      f"ExecuTorch its default pool; medians of alternating rounds. {sys.argv[2]}.\n")
print("| scheme | prompt | TTFT ms etch / ET | ratio | prefill tok/s etch / ET | ratio | decode tok/s etch / ET | ratio | peak RSS MB etch / ET | file MB etch / ET |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (impl, s, n), e in sorted(med.items()):
    if impl != "etch" or ("executorch", s, n) not in med:
        continue
    x = med[("executorch", s, n)]
    fe, fx = sizes[s]
    print(f"| {s} | {n} | {e['ttft_batched_ms']:.0f} / {x['ttft_batched_ms']:.0f} | {x['ttft_batched_ms'] / e['ttft_batched_ms']:.2f}x faster "
          f"| {e['prefill_tok_s']:.0f} / {x['prefill_tok_s']:.0f} | {e['prefill_tok_s'] / x['prefill_tok_s']:.2f}x "
          f"| {e['decode_tok_s']:.1f} / {x['decode_tok_s']:.1f} | {e['decode_tok_s'] / x['decode_tok_s']:.2f}x "
          f"| {e['peak_rss_mb']:.0f} / {x['peak_rss_mb']:.0f} | {fe / 1e6:.0f} / {fx / 1e6:.0f} |")
PY
echo "runs: $RUNS"
