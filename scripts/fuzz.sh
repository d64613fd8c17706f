#!/usr/bin/env bash
# fuzz.sh [--smoke] BUILD SECONDS NAME... — runs each libFuzzer target build/fuzz/fuzz_NAME for
# SECONDS, seeded from tests/fuzz/corpus_NAME (read only) and growing BUILD/fuzz/corpus/NAME,
# then prints one line per target: executions, corpus size, result. A crash, sanitizer report,
# leak, timeout or out-of-memory stops with the target's log tail and exit 1 (the reproducer is
# in BUILD/fuzz/, printed by libFuzzer). --smoke: first checks that $FUZZ_CC (clang) links
# libFuzzer, prints a SKIP line and exits 0 when it does not, else builds the targets itself.
set -uo pipefail
source "$(dirname "$0")/paths.sh"
smoke=0
if [[ ${1:-} == --smoke ]]; then smoke=1; shift; fi
build=$1 secs=$2
shift 2
names=("$@")
cc=${FUZZ_CC:-clang}
# the targets run inside $build/fuzz (crash reproducers land there): the models folder absolute
export KVDRIFT_MODELS=$(cd "$kvd_models" 2>/dev/null && pwd || echo /nonexistent)
mkdir -p "$build/fuzz"
if ((smoke)); then
  probe="$build/fuzz/probe"
  if ! printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' \
       | "$cc" -fsanitize=fuzzer,address -x c - -o "$probe" 2>/dev/null; then
    echo "fuzz-smoke: SKIP: $cc with libFuzzer is not installed (scripts/install-deps.sh installs clang)"
    exit 0
  fi
  rm -f "$probe"
  t0=$(date +%s)
  if ! ${MAKE:-make} --no-print-directory BUILD="$build" CUDA=0 fuzz-bins >"$build/fuzz/build.log" 2>&1; then
    tail -20 "$build/fuzz/build.log"
    echo "fuzz-smoke: FAIL: the fuzz targets do not build"
    exit 1
  fi
  echo "fuzz-smoke: ${#names[@]} targets built in $(( $(date +%s) - t0 )) s; ${secs} s each"
fi
total=0
for n in "${names[@]}"; do
  bin="$build/fuzz/fuzz_$n"
  corpus="$build/fuzz/corpus/$n"
  log="$build/fuzz/$n.log"
  mkdir -p "$corpus"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: the targets parse small files
  (cd "$build/fuzz" && exec "$OLDPWD/$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 "$OLDPWD/$corpus" "$OLDPWD/tests/fuzz/corpus_$n") >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  units=$(ls "$corpus" | wc -l)
  if ((rc != 0)); then
    tail -40 "$log"
    echo "fuzz: $n: FINDING (exit $rc) after ${execs:-?} executions; log $log"
    exit 1
  fi
  total=$((total + ${execs:-0}))
  printf 'fuzz: %-10s %10s executions  %5s corpus files  no finding\n' "$n" "${execs:-?}" "$units"
done
echo "fuzz: ${#names[@]} targets, $total executions in total, no finding"
