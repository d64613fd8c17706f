#!/usr/bin/env bash
# make check: runs the shipped regression cases (cases/*.case) with `kvdrift check`.
set -euo pipefail
build=${1:-build}
shopt -s nullglob
cases=(cases/*.case)
if ((${#cases[@]} == 0)); then
  echo "check: no cases in cases/ yet"
  exit 0
fi
mkdir -p "$build/reports"
exec "$build/kvdrift" check "${cases[@]}" --junit "$build/reports/junit.xml" --json "$build/reports/check.json"
