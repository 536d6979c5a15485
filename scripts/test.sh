#!/usr/bin/env bash
# scripts/test.sh [--sanitize]: installs what is missing, builds mtc and runs the whole
# test suite with ctest; exits non-zero if anything fails. Release build in build/, or with
# --sanitize an AddressSanitizer + UBSan build (RelWithDebInfo, no benchmarks) in build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    -h|--help) sed -n '2,4p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (expected --sanitize)" >&2; exit 2 ;;
  esac
done

source scripts/deps.sh
mtc_install_deps
if [ "$sanitize" = 1 ]; then
  dir=build-asan
  mtc_build "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTC_SANITIZE=address,undefined \
    -DMTC_BUILD_BENCHMARKS=OFF
  # allocator_may_return_null: tests ask for arenas no machine has and expect a Status back,
  # as malloc gives on a normal build, instead of ASan aborting the process.
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  dir=build
  mtc_build "$dir" -DCMAKE_BUILD_TYPE=Release
fi
cd "$dir"
ctest --output-on-failure --no-tests=error -j2
