#!/usr/bin/env bash
# make demo: generates the embedded default model with `kvdrift synth` and runs a real job on it.
set -euo pipefail
build=${1:-build}
model="$build/models/tiny.gguf"
mkdir -p "$build/models"
[ -f "$model" ] || "$build/kvdrift" synth --preset tiny -o "$model"
"$build/kvdrift" run "$model" -p "Once upon a time" -n 32 --step 3
