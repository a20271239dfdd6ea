#!/usr/bin/env bash
# The end-to-end figures of the closing notes: no-op and bank transfers, one and two groups,
# soft and TPM USIG, batching on (64) and off (1), f=1, on this one machine.
# Usage: benches/e2e-matrix.sh [OUT_DIR] [extra cloudbft bench flags...]
set -euo pipefail
out=${1:-target/bench}
shift || true
mkdir -p "$out"
cargo build --release -p cloudbft
for app in noop bank; do
  for groups in 1 2; do
    for usig in soft tpm; do
      for batch in 64 1; do
        name="$app-g$groups-$usig-b$batch"
        echo "== $name" >&2
        TSS2_LOG=all+none RUST_LOG=warn "${CARGO_TARGET_DIR:-target}/release/cloudbft" bench \
          --application "$app" --groups "$groups" --usig "$usig" --max-batch "$batch" \
          --json "$out/$name.json" "$@" | tee -a "$out/summary.txt"
      done
    done
  done
done
