#!/usr/bin/env bash
# Installs the shipped adapters' Python packages (adapters/requirements-NAME.txt, pinned) into one
# venv per adapter under the kvdrift cache: $KVDRIFT_CACHE, else $XDG_CACHE_HOME/kvdrift, else
# ~/.cache/kvdrift, then adapters/NAME (what adapters/NAME runs). Idempotent: a venv whose
# requirements file is unchanged is kept. Usage: scripts/adapters.sh [NAME...] (default: llamacpp;
# also mlx, transformers). A requirements file's line "# pip: OPTIONS" adds OPTIONS to its pip
# install (transformers: --no-deps, its file pins everything). Each venv is checked at the end by
# `adapters/NAME --describe` (the engine imports), else the script fails with its line.
# llama-cpp-python builds llama.cpp from source (about 7 minutes on 2 cores); GGML_NATIVE=OFF
# keeps that build independent of the CPU it was made on. Layers adapters/requirements-NAME.X.txt
# (e.g. llamacpp.server: llama-cpp-python's server for kvdrift probe's tests) are installed into
# NAME's venv after it, each kept while its file is unchanged (no rebuild of the base).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/paths.sh
cache=$kvd_cache
names=("$@")
((${#names[@]})) || names=(llamacpp)
# layers NAME VENV: every adapters/requirements-NAME.X.txt into VENV, unless installed unchanged.
layers() {
  local f stamp
  for f in adapters/requirements-"$1".*.txt; do
    [ -f "$f" ] || continue
    stamp=$2/kvdrift-${f#adapters/}
    if cmp -s "$f" "$stamp"; then
      echo "adapters: ${f#adapters/requirements-} already installed"
      continue
    fi
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" "$2/bin/pip" install --quiet --no-cache-dir -r "$f"
    cp "$f" "$stamp"
    echo "adapters: ${f#adapters/requirements-} installed"
  done
}
for name in "${names[@]}"; do
  req=adapters/requirements-$name.txt
  [ -f "$req" ] || { echo "adapters: no $req" >&2; exit 2; }
  venv=$cache/adapters/$name
  if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/kvdrift-requirements.txt"; then
    echo "adapters: $name already installed in $venv"
    layers "$name" "$venv"
    continue
  fi
  if ! python3 -m venv --help >/dev/null 2>&1; then
    echo "adapters: python3 -m venv is not available (Debian: apt-get install python3-venv)" >&2
    exit 2
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  t0=$(date +%s)
  read -ra opts <<<"$(sed -n 's/^# pip: //p' "$req")"
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" \
    "$venv/bin/pip" install --quiet --no-cache-dir "${opts[@]}" -r "$req"
  cp "$req" "$venv/kvdrift-requirements.txt"
  echo "adapters: $name installed in $venv ($(( $(date +%s) - t0 )) s)"
  layers "$name" "$venv"
done
for name in "${names[@]}"; do
  if ! KVDRIFT_CACHE=$cache adapters/"$name" --describe >/dev/null; then
    echo "adapters: $name is installed but its engine does not load (the line above says why)" >&2
    exit 2
  fi
done
