#!/usr/bin/env bash
# Context switches per ordered request, by role: a count that, unlike CPU time, barely moves
# with whatever else runs on the machine (docs/performance.md, "Wake-ups").
# Usage: benches/cs.sh [CLOUDBFT_BINARY] [CLIENTS] [APPLICATION]
# Starts `cloudbft bench` (one group, f=1, soft USIG, SQLite) for 16 s, and from its 11th to its
# 16th second sums the voluntary and involuntary context switches of every thread of every
# process of the run, by role, divided by the requests the primary ordered meanwhile (its
# `cloudbft_batch_size_sum` metric on 127.0.0.1:8700).
set -euo pipefail
bin=${1:-target/release/cloudbft}
clients=${2:-64}
app=${3:-noop}
bin=$(realpath "$bin")
data=$(mktemp -d)
rmdir "$data"
"$bin" bench --application "$app" --groups 1 --f 1 --clients "$clients" --duration-secs 16 \
  --data-dir "$data" --base-port 7700 > "$data.log" 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null || true; rm -rf "$data" "$data.log"' EXIT
sleep 11
# role (the subcommand) and its threads' context switches, summed by role
snapshot() {
  for p in $(pgrep -f "^$bin "); do
    role=$(tr '\0' ' ' < "/proc/$p/cmdline" | awk '{print $2}')
    for t in /proc/"$p"/task/*; do
      awk -v r="$role" '/ctxt_switches/ {s += $2} END {print r, s}' "$t/status" 2>/dev/null || true
    done
  done | awk '{s[$1] += $2} END {for (r in s) print r, s[r]}' | sort
}
ordered() { curl -s 127.0.0.1:8700/metrics | awk '/^cloudbft_batch_size_sum/ {print $2}'; }
o1=$(ordered); snapshot > "$data.1"
sleep 5
o2=$(ordered); snapshot > "$data.2"
join "$data.1" "$data.2" | awk -v n="$((${o2%.*} - ${o1%.*}))" '
  {d = $3 - $2; t += d; printf "%s %.2f  ", $1, d / n}
  END {printf "| total %.2f context switches per request (%d requests in 5 s)\n", t / n, n}'
rm -f "$data.1" "$data.2"
wait $bench || { cat "$data.log" >&2; exit 1; }
