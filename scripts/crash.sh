#!/usr/bin/env bash
# crash.sh BUILD — crash consistency and concurrency of everything kvdrift writes (make test).
#  1. kill -9 at seeded random moments of `bless` (cold and warm cache) and `sweep -o`: after
#     each kill every golden file and cache entry is absent or byte-identical to the one a
#     complete run writes (these are deterministic; a golden file's "metadata" block, which
#     records the bless command line and its timings, is left out of the comparison, the rest
#     of the file compared byte for byte), and a report folder that holds report.json
#     also holds a complete report.md; then, with the leftover temp files aged past a minute,
#     one more run leaves no temp file anywhere and the same bytes.
#  2. four sweeps started together on one empty cache folder (same synthetic model, same
#     reference and envelope entries): all succeed without a warning, the folder ends with one
#     copy of each entry and no temp file, and a fifth sweep finds both entries cached.
# Seed: $KVD_TEST_SEED (else fixed), printed for reproduction; KEEP=1 keeps the work folder.
# bless_cmd and sweep_cmd exec kvdrift, so that the pid killed is kvdrift itself.
set -uo pipefail
build=${1:-build}
kv="$PWD/$build/kvdrift"
seed=${KVD_TEST_SEED:-0x6b76647269667421}
RANDOM=$((seed % 32768))
work=$(mktemp -d)
[[ -n ${KEEP:-} ]] && echo "crash: work folder $work"
trap '[[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT
fail() { echo "crash: FAIL: $*"; exit 1; }
t0=$(date +%s)

printf '[case]\nname = crash-a\nmodel = synth:tiny\ntokens = 1,2,3,4\nsteps = 2,full\nbackends = naive\nn_gen = 2\n' >"$work/a.case"
printf '[case]\nname = crash-b\nmodel = synth:tiny:seed=1\ntokens = 5,6,7\nsteps = 1,full\nbackends = naive\nn_gen = 2\n' >"$work/b.case"
bless_cmd() { exec "$kv" bless "$work/a.case" "$work/b.case" --golden-dir "$1/golden" --cache "$1/cache" -q; }
sweep_cmd() { exec "$kv" sweep synth:tiny --tokens 1,2,3,4 -n 2 --steps 2,full --backends naive \
                --cache "$1/cache" -o "$1/report" -q; }

# The bytes a complete run writes: goldens and cache entries.
mkdir -p "$work/ref"
(bless_cmd "$work/ref") >/dev/null 2>&1 || fail "reference bless failed"
(sweep_cmd "$work/ref") >/dev/null 2>&1 || fail "reference sweep failed"

# A file's bytes, a golden file's without its "metadata" block (JSON_INDENT(2): the block runs
# from the line `  "metadata": {` to the next line that closes at that indent). A file torn
# inside the block loses everything after it, so it still differs.
bits() { # file
  if [[ $1 == */golden/*.json ]]; then
    awk '/^  "metadata": \{/ { skip = 1; next } skip && /^  \}/ { skip = 0; next } !skip' "$1"
  else
    cat "$1"
  fi
}

# Each file under dir is absent from, or equal to, its twin under ref (same relative path).
same_or_absent() { # dir ref
  local f rel
  while IFS= read -r f; do
    rel=${f#"$1"/}
    [[ $rel == *.tmp.* ]] && continue
    [[ -f $2/$rel ]] || fail "$rel: not written by a complete run"
    cmp -s <(bits "$f") <(bits "$2/$rel") || fail "$rel: torn or different after kill -9"
  done < <(find "$1" -type f)
}
report_complete() { # folder
  [[ -f $1/report.json ]] || return 0
  [[ -f $1/report.md ]] || fail "report.json without report.md after kill -9"
  [[ $(head -c1 "$1/report.json") == '{' && $(tail -c2 "$1/report.json") == '}' ]] ||
    fail "report.json torn"
  [[ -s $1/report.md && $(tail -c1 "$1/report.md" | od -An -c | tr -d ' ') == '\n' ]] ||
    fail "report.md torn"
}
kill_at() { # milliseconds, command...
  local ms=$1
  shift
  ("$@") >/dev/null 2>&1 &
  local pid=$!
  sleep "$(printf '0.%03d' "$ms")"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

kills=0
for i in 1 2 3 4 5 6; do # bless: odd iterations from an empty cache (its writes too)
  d="$work/bless"
  ((i % 2)) && rm -rf "$d/cache"
  mkdir -p "$d"
  kill_at $((RANDOM % 900)) bless_cmd "$d"
  kills=$((kills + 1))
  same_or_absent "$d" "$work/ref"
done
for i in 1 2 3 4 5 6; do # sweep -o: every third from an empty cache
  d="$work/sweep"
  ((i % 3 == 1)) && rm -rf "$d/cache"
  mkdir -p "$d"
  kill_at $((RANDOM % 400)) sweep_cmd "$d"
  kills=$((kills + 1))
  report_complete "$d/report"
  [[ -d $d/cache ]] && same_or_absent "$d/cache" "$work/ref/cache"
done
n_tmp=$(find "$work/bless" "$work/sweep" -name '*.tmp.*' | wc -l)
# and one planted in each folder, named as a killed writer's would be (its pid is gone)
true &
dead=$!
wait "$dead"
for f in bless/golden/crash-a.json bless/cache/x.kvdref sweep/report/report.md sweep/cache/y.kvdenv; do
  [[ -d $(dirname "$work/$f") ]] && echo partial >"$work/$f.tmp.$dead.AbCdEf"
done
# Temp files of killed runs are removed once older than a minute (their process being gone).
find "$work/bless" "$work/sweep" -name '*.tmp.*' -exec touch -d '2 minutes ago' {} +
(bless_cmd "$work/bless") >/dev/null 2>&1 || fail "bless after the kills failed"
(sweep_cmd "$work/sweep") >/dev/null 2>&1 || fail "sweep after the kills failed"
left=$(find "$work/bless" "$work/sweep" -name '*.tmp.*')
[[ -z $left ]] || fail "stale temp files left: $left"
same_or_absent "$work/bless" "$work/ref"
report_complete "$work/sweep/report"
[[ -f $work/bless/golden/crash-a.json && -f $work/bless/golden/crash-b.json ]] ||
  fail "goldens missing after the final bless"
echo "crash: $kills kill -9 runs (seed $seed): no torn golden, cache entry or report;" \
     "$n_tmp temp files left by them and 4 planted stale ones, none after the next run"

# Concurrency: four sweeps racing on one empty cache.
c="$work/shared-cache"
pids=()
for j in 1 2 3 4; do
  "$kv" sweep synth:tiny --tokens 1,2,3,4 -n 2 --steps 2,full --backends naive --cache "$c" \
    -o "$work/conc$j" -q >"$work/conc$j.out" 2>"$work/conc$j.err" &
  pids+=($!)
done
for j in 1 2 3 4; do
  wait "${pids[$((j - 1))]}" || fail "concurrent sweep $j failed: $(cat "$work/conc$j.err")"
  [[ ! -s $work/conc$j.err ]] || fail "concurrent sweep $j warned: $(cat "$work/conc$j.err")"
  # the table rows up to the speed columns (tok/s differ from run to run)
  diff <(grep '^| ' "$work/conc1/report.md" | cut -d'|' -f1-14) \
       <(grep '^| ' "$work/conc$j/report.md" | cut -d'|' -f1-14) >/dev/null ||
    fail "concurrent sweep $j reported other results"
done
n_ref=$(find "$c" -name '*.kvdref' | wc -l)
n_env=$(find "$c" -name '*.kvdenv' | wc -l)
n_syn=$(find "$c" -name 'synth-*.gguf' | wc -l)
left=$(find "$c" -name '*.tmp.*')
((n_ref == 1 && n_env == 1 && n_syn == 1)) ||
  fail "shared cache holds $n_ref references, $n_env envelopes, $n_syn models (want 1 each)"
[[ -z $left ]] || fail "temp files left in the shared cache: $left"
"$kv" sweep synth:tiny --tokens 1,2,3,4 -n 2 --steps 2,full --backends naive --cache "$c" \
  -o "$work/conc5" -q >"$work/conc5.out" 2>&1 || fail "fifth sweep failed"
grep -q 'bits (cached); envelope: .*(cached)' "$work/conc5.out" ||
  fail "fifth sweep did not find the reference and envelope cached"
echo "crash: 4 concurrent sweeps on one cache: all passed, one copy of each entry, no temp" \
     "file; a fifth found both cached ($(( $(date +%s) - t0 )) s in all)"
