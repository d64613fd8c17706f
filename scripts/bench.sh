#!/usr/bin/env bash
# make bench: runs every bench/bench_*.c binary; each prints a table and appends TSV under
# reports/bench/.
set -euo pipefail
build=${1:-build}
mkdir -p reports/bench
shopt -s nullglob
for b in "$build"/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b" reports/bench
done
