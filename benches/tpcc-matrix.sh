#!/usr/bin/env bash
# The TPC-C figures of the closing notes: the unreplicated baseline and the cluster with one and
# two groups, on SQLite and on PostgreSQL, f=1, soft USIG, everything on this one machine.
# Four warehouses (one partition each), 40 terminals (10 per warehouse), zero keying and think
# times, at a reduced population (10,000 items, 300 customers per district) so that loading the
# three database nodes takes seconds. Each run checks its databases and then drops them
# (--drop-databases), so a matrix leaves nothing on the PostgreSQL server.
# Usage: benches/tpcc-matrix.sh [OUT_DIR] [extra cloudbft tpcc run flags...]
set -euo pipefail
out=${1:-target/bench-tpcc}
shift || true
mkdir -p "$out"
cargo build --release -p cloudbft
stamp=$(date +%s)
for db in sqlite postgres; do
  for mode in baseline g1 g2; do
    name="tpcc-$db-$mode"
    echo "== $name" >&2
    flags=(--db "$db" --db-prefix "tpccm_${stamp}_$mode" --warehouses 4
           --items 10000 --customers 300 --warmup-secs 5 --duration-secs 20 --drop-databases)
    case $mode in
      baseline) flags+=(--baseline) ;;
      g1) flags+=(--groups 1) ;;
      g2) flags+=(--groups 2) ;;
    esac
    RUST_LOG=warn "${CARGO_TARGET_DIR:-target}/release/cloudbft" tpcc run "${flags[@]}" \
      --json "$out/$name.json" "$@" | grep -v '^PASS' | tee -a "$out/summary.txt"
  done
done
