#!/usr/bin/env bash
# The end-to-end figures of the closing notes: no-op and bank transfers, one and two groups,
# soft and TPM USIG, batching on (64) and off (1), f=1, on this one machine.
# Usage: benches/e2e-matrix.sh [OUT_DIR] [extra cloudbft bench flags...]
# Writes per run NAME.json with NAME.svg (latency CDF) and NAME-timeline.svg, the printed lines
# in summary.txt, and the table of all runs in summary.md (`cloudbft bench summary`). Compare
# two matrices with `cloudbft bench compare OLD_DIR NEW_DIR` (docs/performance.md).
set -euo pipefail
out=${1:-target/bench}
shift || true
mkdir -p "$out"
cargo build --release -p cloudbft
cloudbft="${CARGO_TARGET_DIR:-target}/release/cloudbft"
runs=()
for app in noop bank; do
  for groups in 1 2; do
    for usig in soft tpm; do
      for batch in 64 1; do
        name="$app-g$groups-$usig-b$batch"
        echo "== $name" >&2
        TSS2_LOG=all+none RUST_LOG=warn "$cloudbft" bench \
          --application "$app" --groups "$groups" --usig "$usig" --max-batch "$batch" \
          --json "$out/$name.json" "$@" | tee -a "$out/summary.txt"
        runs+=("$out/$name.json")
      done
    done
  done
done
"$cloudbft" bench summary "${runs[@]}" > "$out/summary.md"
echo "wrote $out/summary.md" >&2
