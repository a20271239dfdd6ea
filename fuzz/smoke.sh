#!/usr/bin/env bash
# Smoke run of every fuzz target, for CI: one instrumented build of all targets (cargo-fuzz,
# libFuzzer coverage, optimised with debug assertions and overflow checks on), then each target
# for a bounded time (default 10 s, or the first argument) from its committed seed corpus. With
# a longer time it is the campaign of docs/operations.md ("Fuzzing"): one process per target,
# one after the other, on one core.
#
# No AddressSanitizer (-s none): the decoders and everything they call in this repository are
# safe Rust (no `unsafe`), so ASan would find nothing that a panic, a debug assertion or an
# overflow check does not, while it about doubles the build and halves the executions.
#
#   fuzz/smoke.sh [seconds-per-target]
#
# Fails (non-zero exit, a line starting with "fuzz/smoke.sh:") when the nightly toolchain or
# cargo-fuzz is missing and cannot be installed, when a target does not build or does not run,
# and when any target finds a crash (its input is saved in fuzz/artifacts/<target>/; replay it
# with `cargo +nightly fuzz run <target> <file>`). It never passes without having run every
# target. What it finds goes to fuzz/target/smoke-corpus, never into the committed corpus.
#
# Time, measured from a clean fuzz/target on the 2-core machine while other builds kept its
# load near 8: 13 min 30 s in all, 11 min to build the 13 targets (15 now) and 2 min 26 s to run them at
# 10 s each. The build is about 3 min 40 s of CPU time (user + sys), so on an idle 2-core
# machine expect about 2-3 min of build and 5 min in all (plus about 1 min to install
# cargo-fuzz where it is missing). After a change to the crates only: about 2 min 20 s build.
# A longer campaign: docs/operations.md, "Fuzzing".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
seconds="${1:-10}"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz/smoke.sh: seconds per target must be a positive whole number, not '$seconds'" >&2; exit 2; }
fail() { echo "fuzz/smoke.sh: $*" >&2; exit 1; }
# libFuzzer's last coverage figures in a log: edges covered (cov) and features (ft).
stats() {
  local line
  line=$(grep -E '^#[0-9]+.*cov: [0-9]+ ft: [0-9]+' "$1" | tail -n 1 || true)
  sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+).*/cov: \1 ft: \2/' <<<"${line:-cov: ? ft: ?}"
}

# The pinned cargo-fuzz; libFuzzer itself comes with the libfuzzer-sys crate (Cargo.lock).
CARGO_FUZZ_VERSION=0.13.2

command -v rustup >/dev/null || fail "rustup not found: the fuzz targets need a nightly Rust toolchain from rustup"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "== installing the nightly toolchain"
  rustup toolchain install nightly --profile minimal ||
    fail "no nightly toolchain and 'rustup toolchain install nightly' failed: install one by hand"
fi
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked ||
    fail "cargo-fuzz $CARGO_FUZZ_VERSION is not installed and 'cargo install cargo-fuzz' failed"
fi
echo "== $(rustup run nightly rustc --version), $(cargo fuzz --version)"

list="$(cargo +nightly fuzz list)" || fail "cargo fuzz list failed"
read -ra targets <<<"$(echo $list)"
((${#targets[@]})) || fail "cargo fuzz list found no targets"

start=$SECONDS
echo "== building ${#targets[@]} targets"
# One build shares every dependency between the targets.
cargo +nightly fuzz build --sanitizer none --target-dir "$here/target" || fail "the fuzz targets do not build"
built=$((SECONDS - start))
bin="$here/target/x86_64-unknown-linux-gnu/release"

failed=()
table=("| target | runs | cov | ft | crashes |" "|---|---|---|---|---|")
for target in "${targets[@]}"; do
  [[ -x "$bin/$target" ]] || fail "$target was not built ($bin/$target missing)"
  [[ -d "corpus/$target" ]] || fail "$target has no seed corpus in fuzz/corpus/$target"
  work="$here/target/smoke-corpus/$target"
  mkdir -p "$work" "artifacts/$target"
  log="$here/target/smoke-$target.log"
  # The first directory takes what the run finds; the committed seeds are only read. The RSS
  # limit catches a decoder that allocates what an input announces instead of what it holds.
  if "$bin/$target" "$work" "corpus/$target" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="artifacts/$target/" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    ((${runs:-0} > 0)) || fail "$target ran no input (see $log)"
    crashes=0
    echo "ok   $target: $runs runs, $(stats "$log")"
  else
    status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    crashes=1
    echo "FAIL $target (exit $status): see $log and artifacts/$target/"
    tail -n 30 "$log"
    failed+=("$target")
  fi
  read -r cov ft <<<"$(stats "$log" | sed 's/cov: \([0-9?]*\) ft: \([0-9?]*\)/\1 \2/')"
  table+=("| $target | ${runs:-?} | $cov | $ft | $crashes |")
done
printf '%s\n' "${table[@]}"

echo "== build ${built}s, runs $((SECONDS - start - built))s"
((${#failed[@]} == 0)) || fail "crashes in: ${failed[*]}"
echo "fuzz: ${#targets[@]} passed, 0 failed"
