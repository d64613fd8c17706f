#!/usr/bin/env bash
# Builds llama.cpp's own llama-server (the OpenAI-compatible server `kvdrift probe` and its tests
# talk to) from the llama.cpp tree vendored in the pinned llama-cpp-python source distribution
# (scripts/sdist.sh): the same llama.cpp commit the llamacpp adapter runs. Into the kvdrift
# cache, beside the project and never inside it: $kvd_cache/llama-server/{src,build}, the
# binary build/bin/llama-server. CPU only, Release; GGML_NATIVE=OFF as scripts/adapters.sh
# builds llama-cpp-python, so both servers run the same kernels on this CPU; no libcurl, no
# OpenSSL and no prebuilt web UI (nothing is downloaded at build or run time).
# Idempotent: a binary built from the same archive with the same options is kept. Without cmake
# it prints one line and exits 0 (`make deps` does not install cmake: apt-get install cmake).
# About 10 minutes on 2 cores; LLAMA_SERVER_JOBS sets the build's parallel jobs (default: CPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/paths.sh
source scripts/sdist.sh

if ! command -v cmake >/dev/null 2>&1; then
  echo "llama-server: SKIP: cmake not found (apt-get install cmake); nothing built"
  exit 0
fi
root=$kvd_cache/llama-server
bin=$root/build/bin/llama-server
opts=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
      -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF)
want="$sdist_sha ${opts[*]}"
stamp=$root/build/kvdrift-stamp
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "llama-server: already built: $bin"
  exit 0
fi
mkdir -p "$root"
if [ "$(cat "$root/src/.sha256" 2>/dev/null)" != "$sdist_sha" ]; then
  tmp="$(mktemp -d "$root/.dl.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "llama-server: downloading $sdist_req (source distribution)"
  sdist_fetch "$tmp"
  tar -xzf "$tmp/$sdist_name.tar.gz" -C "$tmp" "$sdist_name/vendor/llama.cpp"
  rm -rf "$root/src"
  mv "$tmp/$sdist_name/vendor/llama.cpp" "$root/src"
  echo "$sdist_sha" >"$root/src/.sha256"
  rm -rf "$tmp"
  trap - EXIT
fi
t0=$(date +%s)
rm -f "$stamp"
cmake -S "$root/src" -B "$root/build" "${opts[@]}" >"$root/cmake.log" 2>&1 || {
  tail -n 20 "$root/cmake.log" >&2
  echo "llama-server: cmake configure failed (log: $root/cmake.log)" >&2
  exit 2
}
cmake --build "$root/build" --target llama-server -j "${LLAMA_SERVER_JOBS:-$(nproc)}" \
  >>"$root/cmake.log" 2>&1 || {
  tail -n 20 "$root/cmake.log" >&2
  echo "llama-server: build failed (log: $root/cmake.log)" >&2
  exit 2
}
echo "$want" >"$stamp"
echo "llama-server: built $bin ($(( $(date +%s) - t0 )) s): $("$bin" --version 2>&1 | head -n 1)"
