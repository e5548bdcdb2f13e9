#!/usr/bin/env bash
# Runs every libFuzzer harness for SECONDS each (default 60) on its seeds (fuzz/seeds/NAME, read
# only), the inputs that once crashed it (fuzz/regressions/NAME: replayed first, every run) and a
# working corpus in BUILD/corpus/NAME; a crash, leak or sanitizer report leaves its input
# in BUILD/artifacts/ and fails the run. Prints one line per harness: executions and corpus size.
# usage: fuzz/run.sh BUILD_DIR [SECONDS] [NAME ...]
# RUNS=N stops each harness after N executions instead (SECONDS then only bounds it).
set -uo pipefail
B=$1 T=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
here=$(cd "$(dirname "$0")" && pwd)
names=${*:-program gguf safetensors config tokenizer_json llama2c tokenize chat forward}
mkdir -p "$B/artifacts"
rc=0 passed=0 failed=0
for h in $names; do
  mkdir -p "$B/corpus/$h"
  log=$B/fuzz_$h.log
  # -rss_limit_mb: the harnesses open real models (stories260K, Qwen3's tokenizer); -max_len covers
  # the program and GGUF seeds.
  regr=()
  [ -d "$here/regressions/$h" ] && regr=("$here/regressions/$h")
  "$B/fuzz/fuzz_$h" "$B/corpus/$h" "$here/seeds/$h" "${regr[@]}" -max_total_time="$T" ${RUNS:+-runs=$RUNS} -max_len=65536 -rss_limit_mb=4096 \
    -timeout=30 -artifact_prefix="$B/artifacts/$h-" -print_final_stats=1 >"$log" 2>&1
  r=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*')
  echo "fuzz_$h: ${execs:-?} executions in ${secs:-$T} s, corpus $(ls "$B/corpus/$h" | wc -l) files, exit $r"
  if [ $r -ne 0 ]; then rc=1 failed=$((failed + 1)); grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5
  else passed=$((passed + 1)); fi
done
echo "fuzz: $passed passed, $failed failed"
exit $rc
