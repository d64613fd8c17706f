#!/usr/bin/env bash
# make check: runs the shipped regression cases (cases/*.case) with `kvdrift check`, writes
# JUnit XML, JSON and Markdown under $build/reports/, repeats which cases were skipped (model
# file absent) and which configurations had no golden under their key, and exits with check's
# code (0 pass, 1 a configuration fails or a golden is stale, 2 bad input, 3 nothing ran).
set -uo pipefail
source "$(dirname "$0")/paths.sh"
build=${1:-build}
shopt -s nullglob
cases=(cases/*.case)
if ((${#cases[@]} == 0)); then
  echo "check: no cases in cases/ yet"
  exit 0
fi
mkdir -p "$build/reports"
log="$build/reports/check.log"
echo "check: ${#cases[@]} case(s): ${cases[*]}  (models from $kvd_models)"
# The reference/envelope/synthetic-model cache lives under the build folder, so that make check
# never writes into ~/.cache; $KVDRIFT_CACHE, when set, is used instead (check reads it itself).
cache_args=()
[[ -z ${KVDRIFT_CACHE:-} ]] && cache_args=(--cache "$build/cache")
"$build/kvdrift" check -q "${cases[@]}" "${cache_args[@]}" --junit "$build/reports/junit.xml" \
  --json "$build/reports/check.json" --md "$build/reports/check.md" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo
skips=$(grep -E '^case .*: SKIP: ' "$log" || true)
if [[ -n $skips ]]; then
  echo "check: skipped (not failed):"
  sed -E 's/^case ([^ ]+) \(([^)]*)\): SKIP: /  \1 (\2): /' <<<"$skips"
else
  echo "check: no case skipped"
fi
if grep -q 'no golden for .* under their keys' "$log"; then
  echo "check: some configurations have no golden under their key (blessed on another kind of"
  echo "       machine): they were judged by the reference/envelope classification instead (they"
  echo "       fail only on DRIFT/FLIP/NONFINITE); 'kvdrift bless CASE' here pins their bits."
fi
case $rc in
  0) echo "check: PASS (JUnit: $build/reports/junit.xml, JSON: $build/reports/check.json, Markdown: $build/reports/check.md)" ;;
  1) echo "check: FAIL: a configuration regressed or a golden is stale (see the table above and $build/reports/check.md)" ;;
  3) echo "check: NOTHING RAN: every case was skipped (set KVDRIFT_MODELS?)" ;;
  2) echo "check: ERROR (exit 2): bad case file or input" ;;
  *) if ((rc > 128)); then
       echo "check: ERROR: kvdrift was killed by signal $((rc - 128)) (9: often the kernel's out-of-memory killer; see dmesg)"
     else
       echo "check: ERROR (exit $rc)"
     fi ;;
esac
exit "$rc"
