#!/usr/bin/env bash
# Overload and fairness: normal HTTP clients through the gateway while one client sends 100x
# its share (at the gateway, then as signed requests straight to the primary and replicas) and
# a slowloris client holds connections; prints the normal clients' p95 per phase relative to
# the first and the gateway's and primary's peak memory (docs/operations.md, "Overload
# benchmark").
# Usage: benches/overload.sh [OUT_DIR] [extra cloudbft overload flags...]
set -euo pipefail
out=${1:-target/bench}
shift || true
mkdir -p "$out"
cargo build --release -p cloudbft
bin=${CARGO_TARGET_DIR:-target}/release/cloudbft
RUST_LOG=warn "$bin" overload --json "$out/overload.json" "$@" | tee "$out/overload.txt"
