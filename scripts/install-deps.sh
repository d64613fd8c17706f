#!/usr/bin/env bash
# Installs the Debian packages kvdrift builds against, only when one is missing.
# Checks with dpkg first so that a machine that already has everything never needs root.
set -eu
# clang + libclang-rt-14-dev: libFuzzer for make fuzz / the fuzz smoke run in make test (~40 MB)
# libopenmpi-dev + openmpi-bin: `mpirun -np N kvdrift ref` and its test (~12 MB download)
# libblis4-pthread: the blis backend's library (BLIS 0.9, pthreads build), which the binary
#   opens at run time (dlopen libblis.so.4): no headers, nothing linked (~2 MB download)
pkgs=(build-essential pkg-config libopenblas-dev libmpfr-dev libgmp-dev libcunit1-dev
      libxxhash-dev libjansson-dev libinih-dev libxml2-dev clang libclang-rt-14-dev
      libopenmpi-dev openmpi-bin libblis4-pthread libcurl4-openssl-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
echo "kvdrift: installing missing packages: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
