#!/usr/bin/env bash
# make demo: generates the embedded default model with `kvdrift synth` and runs a real job on it.
set -euo pipefail
build=${1:-build}
model="$build/models/tiny.gguf"
mkdir -p "$build/models"
[ -f "$model" ] || "$build/kvdrift" synth --preset tiny -o "$model"
"$build/kvdrift" run "$model" -p "Once upon a time" -n 32 --step 3
# The product: every prefill step x backend classified against the MPFR reference and the
# stochastic-rounding noise envelope (cached in $build/cache, report in $build/demo-report).
echo
"$build/kvdrift" sweep "$model" -p "Once upon a time, there was a little girl" \
    --steps 1,2,3,5,8,full --backends naive,blas -n 16 \
    --cache "$build/cache" -o "$build/demo-report"
