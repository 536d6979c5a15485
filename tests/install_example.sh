#!/usr/bin/env bash
# mtc as a library (issue 19, part 1): `cmake --install` of the build into a fresh prefix,
# then examples/custom_model (a user's own nn::Module trained under a DTE budget,
# evaluated, saved and loaded back) configured with find_package(mtc) against that prefix
# alone, built and run. Then the proof that the CPU part needs neither CUDA nor MPI:
#   - `ldd` of the example (printed) names no CUDA, cuDNN, cuBLAS, NCCL or MPI library;
#   - the run's LD_DEBUG=files log shows none of them loaded, not even by dlopen;
#   - as root, the example runs again in a chroot that holds only what ldd lists (and the
#     installed plug-ins), so those libraries are on no loader path at all.
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
gpu_or_mpi='lib(cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|cuda|mpi|mpi_cxx|open-pal|open-rte|pmix)\.so'
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install"; }
[ -f "$tmp/prefix/lib/cmake/mtc/mtcConfig.cmake" ] || fail "no mtcConfig.cmake installed"
cmake -S "$src/examples/custom_model" -B "$tmp/example" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release "${flags[@]}" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configuring the example"; }
cmake --build "$tmp/example" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "building the example"; }
(cd "$tmp/example" && LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld" ./custom_model "$tmp/model.safetensors") ||
  fail "running the example"
[ -s "$tmp/model.safetensors" ] || fail "the example wrote no checkpoint"
# ldd's output kept first: `ldd | grep -q` under pipefail fails when grep stops reading early.
libs=$(ldd "$tmp/example/custom_model")
echo "ldd custom_model:"
awk '{print "  " $1 " => " $3}' <<<"$libs"
grep -q "$tmp/prefix/lib/libmtc.so" <<<"$libs" || fail "the example does not use the installed libmtc"
if grep -qE "$gpu_or_mpi" <<<"$libs"; then fail "the example links: $(grep -oE "$gpu_or_mpi[.0-9]*" <<<"$libs" | tr '\n' ' ')"; fi
loaded=$(cat "$tmp"/ld.* | grep -oE 'file=[^ ]+' | sort -u)
[ -n "$loaded" ] || fail "LD_DEBUG=files logged nothing"
if grep -qE "$gpu_or_mpi" <<<"$loaded"; then fail "the run loaded: $(grep -E "$gpu_or_mpi" <<<"$loaded" | tr '\n' ' ')"; fi
echo "the run loaded $(wc -l <<<"$loaded") libraries, none of CUDA, cuDNN, cuBLAS, NCCL or MPI"
ls "$tmp/prefix/lib" | grep -E '^libmtc_(cuda|comm_mpi|comm_nccl)\.so$' | sed 's/^/installed plug-in: /' || true

# The chroot: the example, every library ldd resolved (and the loader), the installed
# prefix with its plug-ins; nothing else. Root only (chroot(2)); a sanitizer build's
# runtime wants /proc, so the check runs in the plain build.
if [ "$(id -u)" != 0 ] || [ -n "$san" ]; then
  echo "chroot check skipped: $([ -n "$san" ] && echo "a sanitizer build" || echo "not root")"
else
  root=$tmp/root
  mkdir -p "$root/tmp" "$root/app"
  cp "$tmp/example/custom_model" "$root/app/"
  mkdir -p "$root$tmp"
  cp -a "$tmp/prefix" "$root$tmp/"
  for f in $(grep -oE '/[^ ]+' <<<"$libs"); do
    [[ $f == "$tmp/prefix/"* ]] && continue
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
  done
  if find "$root" -name '*.so*' | grep -qE "$gpu_or_mpi"; then fail "the chroot holds a CUDA or MPI library"; fi
  chroot "$root" /app/custom_model /tmp/model.safetensors >"$tmp/chroot.log" 2>&1 ||
    { cat "$tmp/chroot.log"; fail "the example in a chroot without CUDA and MPI libraries"; }
  [ -s "$root/tmp/model.safetensors" ] || fail "the example in the chroot wrote no checkpoint"
  echo "chroot: the example ran with only the $(grep -cE '/[^ ]+' <<<"$libs") libraries ldd lists: $(tail -n 1 "$tmp/chroot.log")"
fi
echo PASS
