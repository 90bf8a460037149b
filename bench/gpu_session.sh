#!/usr/bin/env bash
# A lent GPU machine's checks in one call that ends by a deadline: the data-parallel check
# (bench/ddp_check.sh: NCCL), then a sweep of `ktstream compare` runs as parallel processes. Each run
# appends its table rows to $OUT/summary.txt when it ends; a run still going at the deadline is killed
# and keeps its per-epoch log lines ($OUT/epochs.txt). Every run's figures go to $OUT/runs.jsonl.
#   DEADLINE=420 KTSTREAM_DATA=/path/to/data bash bench/gpu_session.sh SWEEP
# SWEEP: one run per line, "NAME compare-arguments..." (no -o; blank lines and # comments skipped).
# Set DEADLINE two minutes or more under the call's limit: the machine's start, imports on a cold disk
# and the copy of $OUT back all come out of the same lease. SMOKE=1: one epoch each on the CPU.
set -u
cd "$(dirname "$0")/.."
sweep=${1:?usage: bench/gpu_session.sh SWEEP}
OUT=${OUT:-/tmp/gpu-session}; mkdir -p "$OUT"; runs=$(mktemp -d)
deadline=$(( $(date +%s) + ${DEADLINE:-420} ))
extra=(--device cuda --threads 1); [[ -n "${SMOKE:-}" ]] && extra=(--device cpu --threads 1 --epochs 1 --patience 1 --max-learners 30)
left() { echo $(( deadline - $(date +%s) )); }  # never 0 in a timeout: that would mean none
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; nproc
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } > "$OUT/summary.txt" 2>&1
if [[ -z "${SMOKE:-}" ]]; then
  ( timeout -k 5 $(( $(left) < 180 ? $(left) : 180 )) bash bench/ddp_check.sh > "$OUT/ddp.txt" 2>&1
    echo "ddp_check exit $?" >> "$OUT/ddp.txt" ) &
fi
while read -r name args; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if (( $(left) < 10 )); then echo "$name not started: the deadline is near" >> "$OUT/summary.txt"; continue; fi
  ( # shellcheck disable=SC2086
    timeout -k 5 "$(left)" python -m ktstream.cli.main compare $args "${extra[@]}" -o "$runs/$name" \
      > "$runs/$name.log" 2>&1
    rc=$?
    grep -h "valid_auc" "$runs/$name.log" | sed "s/^/$name /" >> "$OUT/epochs.txt"
    if [[ -f "$runs/$name/table.json" ]]; then
      python -c "import json,sys; t=json.load(open(sys.argv[1])); [print(json.dumps(dict(r, name=sys.argv[2]))) for r in t['runs']]" \
        "$runs/$name/table.json" "$name" >> "$OUT/runs.jsonl"
      awk -v n="$name" 'NR > 2 && /^$/ {exit} NR > 2 {print n, $0}' "$runs/$name/table.md" >> "$OUT/summary.txt"
    else
      echo "$name exit $rc: $(grep -v valid_auc "$runs/$name.log" | tail -n 1)" >> "$OUT/summary.txt"
    fi ) &
done < "$sweep"
wait
echo "done with $(left) s to the deadline" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"; grep -h -E "rank|difference|exit|Error" "$OUT/ddp.txt" 2>/dev/null
rm -rf "$runs"
