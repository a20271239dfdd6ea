#!/usr/bin/env bash
# Two builds of cloudbft, run in alternating pairs: the way every before/after figure in
# docs/performance.md was taken, since this machine's speed drifts by tens of percent within
# minutes and only runs taken side by side compare.
# Usage: benches/ab.sh OLD_BINARY NEW_BINARY PAIRS OUT_DIR [cloudbft bench flags...]
# Pair i runs OLD then NEW when i is odd, NEW then OLD when it is even (so a drift during a
# pair favours neither side), each writing OUT_DIR/{old,new}/run-i.json and run-i.log (its
# output). At the end it prints every pair's throughput and CPU per operation with their ratio
# new/old, the median ratios, and `cloudbft bench compare` of the two directories (the medians
# of each figure).
# A guide for reviews, not a test: it never fails because a figure got worse. Give it one
# binary and a copy of it to see how far apart identical builds land at the moment.
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
old=$(realpath "$1")
new=$(realpath "$2")
pairs=$3
out=$4
shift 4
mkdir -p "$out/old" "$out/new"
# One figure of a report: the first number after "KEY": (throughput_per_sec, or cpu's total_ms).
figure() { tr -d ' \n' < "$1" | grep -o "\"$2\":[0-9.eE+-]*" | head -1 | cut -d: -f2; }
run() {
  local side=$1 bin=$2 i=$3
  echo "== pair $i, $side ($("$bin" --version))" >&2
  local log=$out/$side/run-$i.log
  if ! "$bin" bench "${flags[@]}" --json "$out/$side/run-$i.json" > "$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
  grep -E 'ops/s|CPU per' "$log" >&2
}
flags=("$@")
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) -eq 1 ]; then
    run old "$old" "$i"
    run new "$new" "$i"
  else
    run new "$new" "$i"
    run old "$old" "$i"
  fi
done
echo
echo "| pair | old ops/s | new ops/s | ratio | old CPU ms/op | new CPU ms/op | ratio |"
echo "|---|---|---|---|---|---|---|"
for i in $(seq 1 "$pairs"); do
  o=$out/old/run-$i.json
  n=$out/new/run-$i.json
  awk -v i="$i" -v ot="$(figure "$o" throughput_per_sec)" -v nt="$(figure "$n" throughput_per_sec)" \
    -v oc="$(figure "$o" total_ms)" -v nc="$(figure "$n" total_ms)" \
    'BEGIN {printf "| %d | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f |\n", i, ot, nt, nt / ot, oc, nc, nc / oc}'
done | tee "$out/pairs.md"
# The median of column $1 of the pairs' table.
median() {
  cut -d'|' -f"$1" "$out/pairs.md" | sort -g | awk '{v[NR] = $1} END {
    m = int((NR + 1) / 2); printf "%.3f", NR % 2 ? v[m] : (v[m] + v[m + 1]) / 2}'
}
echo "median ratios new/old: throughput $(median 5), CPU per operation $(median 8)"
echo
"$new" bench compare "$out/old" "$out/new"
