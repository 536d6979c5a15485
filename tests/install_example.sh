#!/usr/bin/env bash
# mtc as a library (issue 19, part 1 so far): `cmake --install` of the build into a fresh
# prefix, then examples/custom_model (a user's own nn::Module trained under a DTE budget,
# evaluated, saved and loaded back) configured with find_package(mtc) against that prefix
# alone, built and run; prints `ldd` of the example (which today still shows the CUDA and
# MPI libraries libmtc links: they are not yet separate libraries).
# Usage: install_example.sh BUILD_DIR SOURCE_DIR [SANITIZERS]   (run by ctest:
# tests/CMakeLists.txt; SANITIZERS, as MTC_SANITIZE, builds the example with them too)
set -euo pipefail
build=$1
src=$2
san=${3:-}
flags=()
[ -n "$san" ] && flags=(-DCMAKE_CXX_FLAGS="-fsanitize=$san" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$san")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install"; }
[ -f "$tmp/prefix/lib/cmake/mtc/mtcConfig.cmake" ] || fail "no mtcConfig.cmake installed"
cmake -S "$src/examples/custom_model" -B "$tmp/example" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release "${flags[@]}" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configuring the example"; }
cmake --build "$tmp/example" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "building the example"; }
(cd "$tmp/example" && ./custom_model "$tmp/model.safetensors") || fail "running the example"
[ -s "$tmp/model.safetensors" ] || fail "the example wrote no checkpoint"
# ldd's output kept first: `ldd | grep -q` under pipefail fails when grep stops reading early.
libs=$(ldd "$tmp/example/custom_model")
echo "ldd custom_model:"
awk '{print "  " $1 " => " $3}' <<<"$libs"
grep -q "$tmp/prefix/lib/libmtc.so" <<<"$libs" || fail "the example does not use the installed libmtc"
echo PASS
