#!/usr/bin/env bash
# make check: runs the shipped regression cases (cases/*.case) with `kvdrift check`, writes
# JUnit XML and JSON under $build/reports/, repeats which cases were skipped (model file absent)
# and which were judged without a golden for this platform, and exits with check's code
# (0 pass, 1 a configuration fails, 2 bad input).
set -uo pipefail
build=${1:-build}
shopt -s nullglob
cases=(cases/*.case)
if ((${#cases[@]} == 0)); then
  echo "check: no cases in cases/ yet"
  exit 0
fi
mkdir -p "$build/reports"
log="$build/reports/check.log"
echo "check: ${#cases[@]} case(s): ${cases[*]}  (models from ${KVDRIFT_MODELS:-../shared/models})"
# The reference/envelope/synthetic-model cache lives under the build folder, so that make check
# never writes into ~/.cache; $KVDRIFT_CACHE, when set, is used instead (check reads it itself).
cache_args=()
[[ -z ${KVDRIFT_CACHE:-} ]] && cache_args=(--cache "$build/cache")
"$build/kvdrift" check -q "${cases[@]}" "${cache_args[@]}" --junit "$build/reports/junit.xml" \
  --json "$build/reports/check.json" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo
skips=$(grep -E '^case .*: SKIP: ' "$log" || true)
if [[ -n $skips ]]; then
  echo "check: skipped (not failed):"
  sed -E 's/^case ([^ ]+) \(([^)]*)\): SKIP: /  \1 (\2): /' <<<"$skips"
else
  echo "check: no case skipped"
fi
if grep -q 'blessed on: ' "$log"; then
  echo "check: some goldens were blessed on another platform fingerprint: those configurations"
  echo "       were judged by the reference/envelope classification instead (they fail only on"
  echo "       DRIFT/FLIP/NONFINITE); run 'kvdrift bless CASE' on this machine to pin its bits."
fi
case $rc in
  0) echo "check: PASS (JUnit: $build/reports/junit.xml, JSON: $build/reports/check.json)" ;;
  1) echo "check: FAIL: a configuration regressed (see the table above and $build/reports/junit.xml)" ;;
  *) echo "check: ERROR (exit $rc): bad case file or input" ;;
esac
exit "$rc"
