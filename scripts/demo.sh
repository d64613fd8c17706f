#!/usr/bin/env bash
# make demo: generates the embedded default model with `kvdrift synth` and runs a real job on it.
set -euo pipefail
build=${1:-build}
model="$build/models/tiny.gguf"
mkdir -p "$build/models"
[ -f "$model" ] || "$build/kvdrift" synth --preset tiny -o "$model"
"$build/kvdrift" run "$model" -p "Once upon a time" -n 32 --step 3
# The product: every prefill step x thread count on the three CPU backends (naive: exact and
# slow; blas: fast, not step-invariant; det: fast and exact) classified against the MPFR
# reference and the stochastic-rounding noise envelope (cached in $build/cache, report in
# $build/demo-report). Dense attention and one turn keep the table to those two axes.
echo
"$build/kvdrift" sweep "$model" -p "Once upon a time, there was a little girl" \
    --steps 1,2,3,5,8,full --backends naive,blas,det --threads 1,all --attn dense --turn 0 \
    -n 16 \
    --cache "$build/cache" -o "$build/demo-report"
