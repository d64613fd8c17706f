# sdist.sh — sourced by the scripts: the llama-cpp-python source distribution (it vendors
# llama.cpp in vendor/llama.cpp), pinned by version and sha256, and its download.
#   sdist_req   the pip requirement
#   sdist_name  the archive's top folder (and $sdist_name.tar.gz)
#   sdist_sha   its sha256
#   sdist_fetch DIR   downloads it with pip (${PIP:-python3 -m pip}) into DIR and checks its
#                     sha256; returns 2 (one line on stderr) when it does not match.
sdist_req="llama-cpp-python==0.3.36"
sdist_name="llama_cpp_python-0.3.36"
sdist_sha="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

sdist_fetch() {
  local dir=$1 got
  ${PIP:-python3 -m pip} download --quiet --no-deps --no-binary=:all: -d "$dir" "$sdist_req" ||
    return 2
  got="$(sha256sum "$dir/$sdist_name.tar.gz" | cut -d' ' -f1)"
  if [ "$got" != "$sdist_sha" ]; then
    echo "$sdist_name.tar.gz: sha256 $got, expected $sdist_sha" >&2
    return 2
  fi
}
