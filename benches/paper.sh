#!/usr/bin/env bash
# The CloudBFT paper's evaluation (section V, Figs 5-11) with its parameters: TPC-C with 5
# warehouses, 200 ms page stage with one page worker per replica, 1 to 5 groups against 1 to 5
# unreplicated page-rendering servers, the paper's client counts; one JSON per run in OUT_DIR,
# then docs/results/paper.md and its plots from them (`cloudbft paper run` / `paper report`).
#
# Usage: benches/paper.sh [--plan short|medium|full] [OUT_DIR] [-- extra cloudbft tpcc run flags]
#   benches/paper.sh --plan full docs/results/paper-data     # 116 runs
#   benches/paper.sh --plan medium /tmp/paper-medium          # 34 runs
#   benches/paper.sh --plan short /tmp/paper-short            # 2 runs (what CI runs)
# An interrupted run continues where it stopped when started again with the same OUT_DIR.
# `cloudbft paper run --plan full --out X --dry-run` lists the runs and the expected duration.
set -euo pipefail
plan=full
if [[ ${1:-} == --plan ]]; then
  plan=$2
  shift 2
fi
out=${1:-docs/results/paper-data}
shift || true
cargo build --release -p cloudbft
bin="${CARGO_TARGET_DIR:-target}/release/cloudbft"
"$bin" paper run --plan "$plan" --out "$out" "$@"
report=docs/results/paper.md
[[ $plan == full ]] || report="$out/paper.md"
"$bin" paper report --results "$out" --out "$report"
