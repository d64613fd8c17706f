#!/usr/bin/env bash
# make test: the reference across MPI ranks (reference/ref_mpi.c), when mpirun exists and the
# binary was built with MPI (a SKIP line otherwise). Checks, on synthetic models:
#   - the capture is bitwise the same as a plain single-process run for 1, 2, 3 and 4 ranks
#     (a dense model, and an MoE model with sliding windows on 3 ranks);
#   - the cache entry is written once, by rank 0, and is that same capture; a second run reads it;
#   - a model file that differs on one rank fails with a message naming the rank, exit 2, and
#     writes neither the output nor a cache entry;
#   - a rank killed in the middle of the pass ends the job with an error, and no output or cache
#     entry is left.
set -uo pipefail
build=${1:-build}
k=$build/kvdrift
if ! command -v mpirun >/dev/null 2>&1; then
  echo "mpi: SKIP: mpirun not found (openmpi-bin, libopenmpi-dev: scripts/install-deps.sh)"
  exit 0
fi
if ! ldd "$k" 2>/dev/null | grep -q libmpi; then
  echo "mpi: SKIP: $k was built without MPI (no mpicc when it was built)"
  exit 0
fi
mpi=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "mpi: FAIL: $*"; exit 1; }
k=$(realpath "$k")
cd "$dir" || exit 1
"$k" synth --preset tiny -o tiny.gguf >/dev/null 2>&1 || fail "synth tiny"
"$k" synth --preset moe-32x4 -o moe.gguf >/dev/null 2>&1 || fail "synth moe-32x4"
mkdir other && "$k" synth --preset tiny --seed 7 -o other/tiny.gguf >/dev/null 2>&1 ||
  fail "synth tiny seed 7"
req=(--tokens 1,5,9,22,7,100,200,31,3,3,3,3,17 --gen-tokens 4,5,6 -q -j1)

"$k" ref tiny.gguf "${req[@]}" --no-cache -o plain.kvdref >/dev/null || fail "plain ref"
"$k" ref moe.gguf "${req[@]}" --no-cache -o moe-plain.kvdref >/dev/null || fail "plain moe ref"
for n in 1 2 3 4; do
  "${mpi[@]}" -np $n "$k" ref tiny.gguf "${req[@]}" --no-cache -o np$n.kvdref >/dev/null 2>err ||
    fail "$n ranks: $(cat err)"
  cmp -s plain.kvdref np$n.kvdref || fail "$n ranks: the capture differs from one process's"
done
"${mpi[@]}" -np 3 "$k" ref moe.gguf "${req[@]}" --no-cache -o moe-np3.kvdref >/dev/null 2>err ||
  fail "moe, 3 ranks: $(cat err)"
cmp -s moe-plain.kvdref moe-np3.kvdref || fail "moe, 3 ranks: the capture differs"
echo "mpi: ok: 1, 2, 3, 4 ranks give the single-process capture bit for bit (and MoE on 3)"

"${mpi[@]}" -np 2 "$k" ref tiny.gguf "${req[@]}" --cache c >/dev/null 2>err || fail "cache: $(cat err)"
entries=(c/*)
((${#entries[@]} == 1)) || fail "cache: expected one entry, found: ${entries[*]}"
cmp -s plain.kvdref "${entries[0]}" || fail "cache: the entry is not the capture"
"${mpi[@]}" -np 2 "$k" ref tiny.gguf "${req[@]}" --cache c 2>err | grep -q 'read from the cache' ||
  fail "cache: the second run did not read the entry: $(cat err)"
echo "mpi: ok: one cache entry, by rank 0, equal to the capture; read back"

"${mpi[@]}" -np 1 "$k" ref tiny.gguf "${req[@]}" --cache m -o mm.kvdref : \
  -np 1 -wdir other "$k" ref tiny.gguf >out 2>&1
rc=$?
((rc == 2)) || fail "mismatched model: exit $rc, expected 2: $(cat out)"
grep -q 'rank 1: model tiny.gguf .* differs between the ranks' out ||
  fail "mismatched model: no message naming rank 1: $(cat out)"
[[ ! -e mm.kvdref && -z $(ls m 2>/dev/null) ]] || fail "mismatched model: something was written"
echo "mpi: ok: a model that differs on rank 1 is refused (exit 2, nothing written)"

# 200 tokens at 512 bits: a pass of several seconds, long enough to be killed in the middle
long=$(seq -s, 1 200)
"${mpi[@]}" -np 2 "$k" ref tiny.gguf --tokens "$long" --prec 512 -j1 --cache d -o dd.kvdref \
  >out 2>&1 &
job=$!
for _ in $(seq 200); do
  grep -q 'multiply-adds' out && break
  sleep 0.05
done
grep -q 'multiply-adds' out || { kill "$job"; fail "killed rank: the pass did not start"; }
# rank 1 among the job's descendants (mpirun may start the ranks through a child of its own),
# looked for until it shows, for a loaded machine where it is slow to appear
descendants() {
  local c
  for c in $(pgrep -P "$1"); do
    echo "$c"
    descendants "$c"
  done
}
victim=""
for _ in $(seq 100); do
  for p in $(descendants "$job"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
  done
  [[ -n $victim ]] && break
  sleep 0.05
done
[[ -n $victim ]] || { kill "$job"; fail "killed rank: rank 1's process not found"; }
kill -9 "$victim"
wait "$job"
rc=$?
((rc != 0)) || fail "killed rank: exit 0: $(cat out)"
grep -q 'rank 1' out || fail "killed rank: no message naming rank 1: $(cat out)"
grep -q '^reference:.*computed' out && fail "killed rank: the pass finished anyway: $(cat out)"
[[ ! -e dd.kvdref && -z $(ls d 2>/dev/null) ]] || fail "killed rank: something was written"
echo "mpi: ok: rank 1 killed in the middle of the pass: exit $rc, nothing written"
