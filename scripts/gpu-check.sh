#!/usr/bin/env bash
# Every check that needs a GPU, in one run of at most 10 minutes on a machine with one GPU
# (the device machine: nvcc, CMake, ninja and PyTorch, but no MPI, no Debian packages and
# no package registry), with every figure written to one markdown file.
#
#   scripts/gpu-check.sh --prepare [DIR]     on the development machine, before: builds
#       build-gpu/ (Release, CUDA sm_90, MPI off, tests on) from the commit HEAD (a
#       `git archive` of it in build-gpu-src/, so half-done edits in the tree stay out;
#       --worktree builds the tree as it is, in build-gpu-wt/), and packs mtc-train,
#       mtc-bench-comm, the GPU tests (tests/cuda_*_test.cc, tests/*nccl*_test.cc) and
#       the shared libraries they need that the device machine lacks (abseil, oneDNN,
#       OpenBLAS, libgfortran, libgomp...; not glibc, libstdc++, libgcc_s, nor the CUDA
#       toolkit's or the driver's) into DIR/mtc-gpu-bundle.tar.xz (DIR: build-gpu-bundle).
#       libstdc++ goes in too, used only where the machine's own is too old. Prints the
#       bundle's size: the device tool carries at most 64 MiB with the working tree.
#   scripts/gpu-check.sh OUTFILE [--bundle DIR] [--build DIR] [--deadline S] [--steps LIST]
#       on the device machine (or anywhere): takes the binaries from DIR/mtc-gpu-bundle.tar.xz
#       (unpacked under /tmp), else from the build folder --build (default build-gpu), else
#       builds build-gpu/ there (which needs the libraries above). Then, one section each
#       in OUTFILE with its command, exit status, figures and the tail of its log:
#         1. the machine: GPU, driver, nvcc, python3 and torch, glibc and libstdc++;
#         2. the libraries: every one the binaries need resolves, the bundle's from the
#            bundle, cuDNN, cuBLAS and NCCL from the toolkit or PyTorch's wheels;
#         3. start-up: mtc-train --help and mtc-bench-comm --help with those libraries;
#         4. the GPU tests, each binary whole (its CPU-only tests run too);
#         5. ResNet-56, 22 iterations, --device cuda against --device cpu, same seed:
#            the loss per iteration and the time per iteration of both;
#         6. NCCL on one rank without mpirun: mtc-bench-comm --backend nccl;
#         7. benchmarks/resnet50_gpu.sh: ResNet-50 beside PyTorch;
#         8. DTP's cost model on one GPU: GPT and VGG-16 under --dtp=auto --dtp_report,
#            predicted against measured op times (benchmarks/dtp_predict.sh --logs);
#         9. DTE on the GPU: ResNet-50 at batch 128 under 50% and 30% of its peak (and
#            30% with TMA): each run's peak, time against the unlimited run's, evictions;
#        10. training through NCCL on one rank: ResNet-20 with --sync_bn and the GPT under
#            --dtp=p1, each beside the same run without NCCL;
#        11. TMA on the GPU: a 48-layer GPT with and without --tma (its packing moves
#            tensors within the device): losses bit for bit, the high water;
#        12. DTP's GPU projection against this GPU: dtp_gpu_projection's one-GPU time per
#            iteration (H100 figures, fp32) for GPT-2 small and the 24-layer GPT at 8
#            sequences of 1024, beside mtc-train's measured one.
#       --steps LIST (comma-separated: tests, resnet56, nccl, resnet50, dtp, dte,
#       nccl-training, tma, projection; default all) runs only those of steps 4-12, for a
#       second, shorter device call; steps 1-3 always run.
#       Each step runs under `timeout` and the whole run under --deadline (540 s), so it
#       ends inside the device tool's 10 minutes even if a step hangs; a failed step is
#       recorded and the next one runs. Full logs: OUTFILE.logs.tar.gz beside OUTFILE.
#       Without a GPU (no nvidia-smi, or it lists none) steps 4-7 are replaced by what
#       runs without one: "no GPU found: skipping the GPU steps", the GPU tests run and
#       must pass or skip with their no-GPU message, mtc-train --device cuda must fail
#       with a clear error, and mtc-bench-comm runs on the local backend.
# Exit: 0 every step that ran passed (with no GPU: the steps without one); 1 a step
# failed; 2 usage error or a failed --prepare. docs/cuda.md gives the device tool call.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

cd "$(dirname "$0")/.."
bundle_name=mtc-gpu-bundle
# The build's configuration, here (--prepare) and there (a build without a bundle).
# shellcheck disable=SC2016  # $ORIGIN is the loader's, not the shell's
cmake_flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DMTC_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
             -DMTC_WITH_MPI=OFF -DMTC_BUILD_TESTS=ON -DMTC_BUILD_BENCHMARKS=ON '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib')

# ---------------------------------------------------------------- shared helpers

# nvcc_bin: nvcc on PATH, else the conventional /usr/local/cuda/bin/nvcc.
nvcc_bin() { command -v nvcc || echo /usr/local/cuda/bin/nvcc; }

# lib_kind PATH: system (glibc, libstdc++, libgcc_s: on every Linux machine), cuda (the
# toolkit's, cuDNN, NCCL or the driver's: the GPU machine has its own) or bundle.
lib_kind() {
  local base=${1##*/}
  if [[ $base =~ ^(linux-vdso|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libstdc\+\+|libgcc_s)[.-] ]]; then
    echo system
  elif [[ $1 == /usr/local/cuda* || $1 == /usr/local/nvidia* || $1 == */site-packages/nvidia/* ||
          $base =~ ^lib(cuda|nvidia-|cudnn|nccl|cublas|cudart|nvrtc|nvJitLink|cufft|curand|cusparse|cusolver) ]]; then
    echo cuda
  else
    echo bundle
  fi
}

# resolved FILE...: "soname path" for each library ldd resolves for FILEs ("not found"
# as the path when it does not), once each.
resolved() {
  local f
  for f in "$@"; do ldd "$f" 2>&1 || true; done |
    awk '$2 == "=>" { print $1, ($3 == "not" ? "not-found" : $3) }' | sort -u
}

# ---------------------------------------------------------------- --prepare

# sync_tree NEW OLD: makes OLD hold NEW's files, touching only the files that differ, so
# a rebuild from OLD recompiles what changed and nothing else.
sync_tree() {
  local f
  mkdir -p "$2"
  (cd "$1" && find . -type f) | while IFS= read -r f; do
    if ! cmp -s "$1/$f" "$2/$f"; then mkdir -p "$(dirname "$2/$f")"; cp "$1/$f" "$2/$f"; fi
  done
  (cd "$2" && find . -type f) | while IFS= read -r f; do
    [ -e "$1/$f" ] || rm -f "$2/$f"
  done
}

prepare() {
  local dir=build-gpu-bundle worktree=0 jobs=${JOBS:-2}
  while [ $# -gt 0 ]; do
    case "$1" in
      --worktree) worktree=1; shift ;;
      -h|--help) usage; exit 0 ;;
      -*) echo "gpu-check.sh --prepare: unknown flag $1" >&2; exit 2 ;;
      *) dir=$1; shift ;;
    esac
  done
  local build=build-gpu src=build-gpu-src what
  [ -x "$(nvcc_bin)" ] ||
    { echo "gpu-check.sh --prepare: no nvcc: this needs the CUDA toolkit" >&2; exit 2; }
  if [ "$worktree" = 1 ]; then
    build=build-gpu-wt src=.
    what="the working tree at $(git rev-parse --short HEAD) with $(git status --short | wc -l) changed files"
  else
    local tmp
    tmp=$(mktemp -d)
    git archive HEAD | tar -x -C "$tmp"
    sync_tree "$tmp" "$src"
    rm -rf "$tmp"
    what="commit $(git rev-parse HEAD) (git archive)"
  fi
  echo "== configure $build from $what"
  cmake -S "$src" -B "$build" "${cmake_flags[@]}" >"$build.configure.log" 2>&1 ||
    { tail -n 30 "$build.configure.log" >&2; echo "gpu-check.sh --prepare: configure failed" >&2; exit 2; }
  grep -E '\[(found|missing)\]' "$build.configure.log" || true
  local dep
  for dep in CUDA cuDNN NCCL GoogleTest; do
    grep -q "\[found\]   $dep" "$build.configure.log" ||
      { echo "gpu-check.sh --prepare: configure found no $dep: nothing to check on a GPU" >&2; exit 2; }
  done
  local tests=() t
  for t in "$src"/tests/cuda_*_test.cc "$src"/tests/*nccl*_test.cc; do
    [ -e "$t" ] && tests+=("$(basename "$t" .cc)")
  done
  echo "== build (ninja -j$jobs): mtc-train mtc-bench-comm dtp_gpu_projection ${tests[*]}"
  ninja -C "$build" -j"$jobs" mtc-train mtc-bench-comm dtp_gpu_projection "${tests[@]}"

  local stage
  stage=$(mktemp -d)
  local b=$stage/$bundle_name
  mkdir -p "$b/bin" "$b/lib" "$b/compat"
  cp "$build/launch/mtc-train" "$build/benchmarks/mtc-bench-comm" "$build/benchmarks/dtp_gpu_projection" "$b/bin/"
  for t in "${tests[@]}"; do cp "$build/tests/$t" "$b/bin/"; done
  # The plug-ins libmtc loads by name from its own folder (comm/plugin.h): the CUDA backend
  # and NCCL's. The MPI one stays out: the GPU machine has no MPI.
  cp "$build/lib/libmtc_cuda.so" "$build/lib/libmtc_comm_nccl.so" "$b/lib/"
  strip --strip-unneeded "$b"/bin/* "$b"/lib/libmtc_cuda.so "$b"/lib/libmtc_comm_nccl.so
  local soname path kind
  while read -r soname path; do
    [ "$path" != not-found ] ||
      { echo "gpu-check.sh --prepare: $soname not found for the built binaries" >&2; exit 2; }
    kind=$(lib_kind "$path")
    case "$kind" in
      bundle) cp -L "$path" "$b/lib/$soname" ;;
      system) [[ $soname != libstdc++* ]] || cp -L "$path" "$b/compat/$soname" ;;
    esac
  done < <(resolved "$b"/bin/* "$b"/lib/libmtc_cuda.so "$b"/lib/libmtc_comm_nccl.so)
  {
    echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') from $what"
    echo "configure: ${cmake_flags[*]}"
    echo "nvcc: $("$(nvcc_bin)" --version | tail -n 2 | head -n 1)"
    echo "glibc: $(ldd --version | head -n 1)"
    echo "libstdc++ needed: $(objdump -T "$b"/bin/* "$b"/lib/* 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -n 1)"
    echo "glibc needed: $(objdump -T "$b"/bin/* "$b"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
    echo "cuda libraries expected on the GPU machine:"
    resolved "$b"/bin/* "$b"/lib/libmtc_cuda.so "$b"/lib/libmtc_comm_nccl.so | while read -r soname path; do
      [ "$(lib_kind "$path")" != cuda ] || echo "  $soname (here: $path)"
    done
    for h in cudnn_version.h nccl.h; do
      grep -hE '#define (CUDNN|NCCL)_(MAJOR|MINOR|PATCH(LEVEL)?) ' "$(dirname "$(readlink -f "$(nvcc_bin)")")/../include/$h" 2>/dev/null |
        awk '{ printf "  %s %s\n", $2, $3 }' || true
    done
    echo "files:"
    (cd "$b" && find bin lib compat -type f -printf '  %p %s\n' | sort)
  } >"$b/MANIFEST"
  mkdir -p "$dir"
  echo "== pack $dir/$bundle_name.tar.xz"
  tar -C "$stage" -cf - "$bundle_name" | xz -9 -T2 >"$dir/$bundle_name.tar.xz.tmp"
  mv "$dir/$bundle_name.tar.xz.tmp" "$dir/$bundle_name.tar.xz"
  cat "$b/MANIFEST"
  local raw packed
  raw=$(du -sb "$b" | cut -f1)
  packed=$(stat -c %s "$dir/$bundle_name.tar.xz")
  rm -rf "$stage"
  awk -v r="$raw" -v p="$packed" -v d="$dir/$bundle_name.tar.xz" 'BEGIN {
    printf "bundle: %s, %.1f MiB (%.1f MiB unpacked); the device tool carries 64 MiB with the tree\n", d, p / 1048576, r / 1048576 }'
  [ "$packed" -le $((48 * 1048576)) ] ||
    { echo "gpu-check.sh --prepare: the bundle is over 48 MiB: too large to carry with room to spare" >&2; exit 2; }
}

# ---------------------------------------------------------------- the check

out=""          # OUTFILE
work=""         # scratch: the unpacked bundle, wrappers, logs
failed=0        # a step failed
summary=()      # "step: status" lines

# md LINE...: lines into OUTFILE; say LINE...: into OUTFILE and on stdout.
md() { printf '%s\n' "$@" >>"$out"; }
say() { md "$@"; printf '%s\n' "$@"; }

# left: seconds until the run's deadline.
left() { echo $((deadline - (SECONDS - t0))); }

# show CMD...: the command as one line, the scratch folder written $WORK.
show() { local s; s=$(printf '%q ' "$@"); s=${s% }; echo "${s//$work/\$WORK}"; }

# note STEP STATUS: records a step's status for the summary; anything but ok or skipped
# fails the run.
note() {
  summary+=("$1: $2")
  case "$2" in ok*|skipped*) ;; *) failed=1 ;; esac
}

# run_step NAME LIMIT CMD...: runs CMD under `timeout` (LIMIT seconds, less if the
# deadline is nearer) with its output in $logs/NAME.log; sets rc (124: timed out) and log,
# and writes the command and its exit status to OUTFILE.
run_step() {
  local name=$1 lim=$2 t; shift 2
  log=$work/logs/$name.log
  [ "$lim" -le $(($(left) - 15)) ] || lim=$(($(left) - 15))
  md "" "command: \`$(show "$@")\`"
  if [ "$lim" -lt 5 ]; then
    rc=125
    : >"$log"
    say "$name: not run: the run's deadline is reached"
    return
  fi
  t=$SECONDS
  if timeout -k 10 "$lim" "$@" >"$log" 2>&1; then rc=0; else rc=$?; fi
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    say "$name: exit status $rc: TIMED OUT after $((SECONDS - t)) s (limit $lim s)"
  else
    say "$name: exit status $rc ($((SECONDS - t)) s, limit $lim s)"
  fi
}

# status_of RC: the summary's word for an exit status.
status_of() {
  case "$1" in
    0) echo ok ;;
    124|137) echo "FAIL (timed out)" ;;
    125) echo "FAIL (not run: deadline)" ;;
    *) echo "FAIL (exit $1)" ;;
  esac
}

# tail_log [N]: the last N (30) lines of $log in OUTFILE.
tail_log() {
  md "" "log tail (${log#"$work"/}, last ${1:-30} lines):" '```'
  tail -n "${1:-30}" "$log" >>"$out"
  md '```'
}

# gtest_figures: the counts a GoogleTest binary printed in $log, its failed tests and
# the messages of its skipped ones.
gtest_figures() {
  local ran passed skipped failed_n
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$log" | tail -n 1)
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  failed_n=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  say "- tests: ${ran:-?} ran, ${passed:-0} passed, ${skipped:-0} skipped, ${failed_n:-0} failed"
  local l n m
  while IFS= read -r l; do say "- failed: $l"; done < <(sed -n 's/^\[  FAILED  \] \([A-Za-z].*\)/\1/p' "$log" | sort -u)
  while read -r n m; do say "- skipped $n with: $m"; done < <(grep -A1 ': Skipped$' "$log" | grep -vE ': Skipped$|^--$' | sort | uniq -c)
  if grep -q ': Failure$' "$log"; then
    md "" "failures (the first 60 lines):" '```'
    grep -A8 ': Failure$' "$log" | head -n 60 >>"$out"
    md '```'
  fi
}

# get_binaries: fills $work/bin with the binaries and sets libdirs, from the bundle, a
# build folder, or a build made now.
get_binaries() {
  md "" "## 2. Binaries and libraries"
  local tarball=$bundle_dir/$bundle_name.tar.xz
  mkdir -p "$work/bin"
  if [ -f "$tarball" ]; then
    run_step unpack 60 tar -C "$work" -xJf "$tarball"
    if [ "$rc" != 0 ] && command -v python3 >/dev/null; then
      md "(tar could not unpack it; python3's tarfile instead)"
      run_step unpack 60 python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$tarball" "$work"
    fi
    note "unpack the bundle" "$(status_of "$rc")"
    [ "$rc" = 0 ] || return 1
    source_of_binaries="the bundle $tarball"
    cp "$work/$bundle_name"/bin/* "$work/bin/"
    libdirs=$work/$bundle_name/lib
    md "" "MANIFEST of the bundle:" '```'
    cat "$work/$bundle_name/MANIFEST" >>"$out"
    md '```'
    return 0
  fi
  if [ ! -x "$build_dir/launch/mtc-train" ]; then
    md "no bundle at $tarball and no $build_dir/launch/mtc-train: building $build_dir here"
    run_step configure 120 cmake -S . -B "$build_dir" "${cmake_flags[@]}"
    note configure "$(status_of "$rc")"
    [ "$rc" = 0 ] || { tail_log; return 1; }
    local tests=() t
    for t in tests/cuda_*_test.cc tests/*nccl*_test.cc; do [ -e "$t" ] && tests+=("$(basename "$t" .cc)"); done
    run_step build 360 ninja -C "$build_dir" mtc-train mtc-bench-comm dtp_gpu_projection "${tests[@]}"
    note build "$(status_of "$rc")"
    [ "$rc" = 0 ] || { tail_log; return 1; }
  fi
  source_of_binaries="the build folder $build_dir"
  cp "$build_dir/launch/mtc-train" "$build_dir/benchmarks/mtc-bench-comm" "$work/bin/"
  [ ! -x "$build_dir/benchmarks/dtp_gpu_projection" ] || cp "$build_dir/benchmarks/dtp_gpu_projection" "$work/bin/"
  for t in "$build_dir"/tests/cuda_*_test "$build_dir"/tests/*nccl*_test; do [ -x "$t" ] && cp "$t" "$work/bin/"; done
  libdirs=$build_dir/lib
  return 0
}

# objects: what must resolve on this machine: the binaries and the GPU plug-ins (in the
# first folder of libdirs, beside libmtc.so).
objects() {
  local p
  printf '%s\n' "$work"/bin/*
  for p in libmtc_cuda.so libmtc_comm_nccl.so; do [ -e "${libdirs%%:*}/$p" ] && echo "${libdirs%%:*}/$p"; done
  return 0
}

# cuda_candidates: folders that may hold the CUDA libraries: the toolkit's, then
# PyTorch's wheels (nvidia/*/lib, torch/lib).
cuda_candidates() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
    [ -d "$d" ] && echo "$d"
  done
  if command -v python3 >/dev/null; then
    timeout 60 python3 - <<'EOF' 2>/dev/null || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
seen = set()
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))) + [os.path.join(r, "torch", "lib")]:
        d = os.path.realpath(d)
        if os.path.isdir(d) and d not in seen:
            seen.add(d)
            print(d)
EOF
  fi
}

# check_libraries: adds to libdirs the folders of the CUDA libraries that do not resolve,
# and the bundle's libstdc++ if the machine's is too old; then every library must resolve,
# and, from a bundle, each one not of the system or CUDA from the bundle.
check_libraries() {
  local missing soname path dir found kind
  export LD_LIBRARY_PATH=$libdirs
  missing=$(resolved $(objects) | awk '$2 == "not-found" { print $1 }')
  if [ -n "$missing" ]; then
    while IFS= read -r dir; do
      found=0
      for soname in $missing; do [ -e "$dir/$soname" ] && found=1; done
      if [ "$found" = 1 ]; then
        libdirs=$libdirs:$dir
        export LD_LIBRARY_PATH=$libdirs
        missing=$(resolved $(objects) | awk '$2 == "not-found" { print $1 }')
        [ -n "$missing" ] || break
      fi
    done < <(cuda_candidates)
  fi
  if [ -d "$work/$bundle_name/compat" ] &&
     grep -q "version .GLIBCXX_.* not found" <<<"$(ldd "$work"/bin/* "$work/$bundle_name"/lib/* 2>&1)"; then
    libdirs=$libdirs:$work/$bundle_name/compat
    export LD_LIBRARY_PATH=$libdirs
    say "- this machine's libstdc++ is older than the build's: the bundle's libstdc++ is used"
  fi
  unset LD_LIBRARY_PATH
  md "" "LD_LIBRARY_PATH for mtc's binaries (the wrappers in \$WORK/run set it; nothing else gets it):" \
    "\`${libdirs//$work/\$WORK}\`" "" "| library | from |" "|---|---|"
  local bad=0 nb=0
  while read -r soname path; do
    kind=$(lib_kind "$path")
    if [ "$path" = not-found ]; then
      bad=1; md "| $soname | **not found** |"
    elif [ "$kind" = bundle ] && [[ $source_of_binaries == "the bundle"* ]] && [[ $path != "$work"/* ]]; then
      bad=1; md "| $soname | **${path}: outside the bundle** |"
    elif [ "$kind" = bundle ]; then
      nb=$((nb + 1))
    else
      md "| $soname | ${path//$work/\$WORK} |"
    fi
  done < <(LD_LIBRARY_PATH=$libdirs resolved $(objects))
  local first=${libdirs%%:*}
  md "| $nb others | ${first//$work/\$WORK} |"
  # ldd's output is taken whole first: `ldd | grep -q` under pipefail fails when grep stops early.
  if grep -q "version .* not found" <<<"$(LD_LIBRARY_PATH=$libdirs ldd $(objects) 2>&1)"; then
    bad=1
    md "" "version errors:" '```'
    LD_LIBRARY_PATH=$libdirs ldd $(objects) 2>&1 | grep "version .* not found" | sort -u >>"$out"
    md '```'
  fi
  if [ "$bad" = 0 ]; then
    say "- every library resolves: $nb from ${first//$work/\$WORK}, the others as the table says"
    note libraries ok
  else
    say "- some libraries do not resolve as they should: see the table above"
    note libraries FAIL
  fi
  # Wrappers: mtc's binaries with LD_LIBRARY_PATH, so that python3 and torch never see it.
  mkdir -p "$work/run"
  local b
  for b in "$work"/bin/*; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libdirs" "$b" >"$work/run/${b##*/}"
    chmod +x "$work/run/${b##*/}"
  done
}

machine() {
  md "## 1. The machine"
  md "" '```'
  {
    echo "host: $(uname -srm)"
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "cpus: $(nproc)"
    if command -v nvidia-smi >/dev/null; then
      timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' || echo "gpu: nvidia-smi failed"
    else
      echo "gpu: no nvidia-smi"
    fi
    echo "nvcc: $("$(nvcc_bin)" --version 2>/dev/null | tail -n 2 | head -n 1)"
    echo "glibc: $(ldd --version 2>/dev/null | head -n 1)"
    local cxx
    cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ { if (!p) print $NF; p = 1 }')
    if [ -n "$cxx" ]; then
      echo "libstdc++: $cxx, up to $(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$cxx" | sort -uV | tail -n 1)"
    else
      echo "libstdc++: not in ldconfig's cache"
    fi
    if command -v python3 >/dev/null; then
      echo "python3: $(python3 --version 2>&1) at $(command -v python3)"
      echo "torch: $(timeout 60 python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpus", torch.cuda.device_count())' 2>&1 | tail -n 1)"
    else
      echo "python3: none"
    fi
  } >>"$out" 2>&1
  md '```'
}

# have_gpu: nvidia-smi lists at least one GPU.
have_gpu() {
  command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

startup() {
  md "" "## 3. Start-up with these libraries"
  local b
  for b in mtc-train mtc-bench-comm; do
    run_step "$b-help" 30 "$work/run/$b" --help
    # absl's --help exits 1 after the list; a loader error is 127, a crash 128 + signal.
    local n
    n=$(grep -cE -- '^ *--[a-z]' "$log" || true)
    if { [ "$rc" = 0 ] || [ "$rc" = 1 ]; } && [ "$n" -gt 0 ]; then
      say "- $b --help listed $n flags (exit $rc)"
      note "$b --help" ok
    else
      say "- $b --help did not list its flags"
      note "$b --help" "FAIL (exit $rc)"
      tail_log
    fi
  done
  local tests=()
  for b in "$work"/bin/*_test; do [ -e "$b" ] && tests+=("${b##*/}"); done
  say "- GPU test binaries: ${tests[*]:-none}"
  [ "${#tests[@]}" -gt 0 ] || note "GPU test binaries" "FAIL (none)"
}

# gpu_tests LIMIT BUDGET: each test binary under LIMIT seconds, all of them under BUDGET.
gpu_tests() {
  md "" "## 4. GPU tests"
  local b lim until=$((SECONDS + $2))
  for b in "$work"/bin/*_test; do
    [ -e "$b" ] || continue
    md "" "### ${b##*/}"
    lim=$1
    [ "$lim" -le $((until - SECONDS)) ] || lim=$((until - SECONDS))
    run_step "${b##*/}" "$lim" "$work/run/${b##*/}" --gtest_color=no
    gtest_figures
    if [ "$rc" = 0 ] && grep -A1 ': Skipped$' "$log" | grep -qi 'no GPU'; then
      say "- FAIL: tests skipped for want of a GPU, but nvidia-smi lists one"
      note "${b##*/}" "FAIL (skipped: no GPU seen)"
    else
      note "${b##*/}" "$(status_of "$rc")"
    fi
    tail_log 25
  done
}

# losses LOG: "iteration loss" per progress line of an mtc-train log.
losses() { sed -n 's/^iter \([0-9]*\) loss \([^ ]*\).*/\1 \2/p' "$1"; }

# resnet56: the same training on the GPU, on the CPU with every core, and on the CPU with
# one thread: the last two differ only in summation order, as the GPU does, so their gap
# says how far such differences alone carry the losses apart.
resnet56() {
  md "" "## 5. ResNet-56: --device cuda against --device cpu"
  local flags=(--model=resnet56 --batch=64 --iterations=10 --warmup=2 --seed=0 --lr=0.002
               --data=synthetic --log_every=1)
  md "Same seed, model, data and lr 0.002 (as CudaTraining.ResNet56LossesMatchTheCpu). Judged: the" \
     "first loss within 1e-4 relative of the CPU's and the first three within 1e-3; later ones drift" \
     "apart by summation order alone, as the CPU's own do between 1 and $(nproc) threads (last column)."
  local dev rcs=() runs=(cuda cpu cpu1)
  for dev in "${runs[@]}"; do
    case "$dev" in
      cuda) run_step resnet56-cuda 75 "$work/run/mtc-train" "${flags[@]}" --device=cuda ;;
      cpu) run_step resnet56-cpu 75 "$work/run/mtc-train" "${flags[@]}" --device=cpu --threads="$(nproc)" ;;
      cpu1) run_step resnet56-cpu1 75 "$work/run/mtc-train" "${flags[@]}" --device=cpu --threads=1 ;;
    esac
    rcs+=("$rc")
    losses "$log" >"$work/logs/resnet56-$dev.losses"
    if [ "$rc" = 0 ]; then
      local s
      s=$(grep '^summary ' "$log" | tail -n 1 || true)
      say "- $dev: sec_per_iter $(field "$s" sec_per_iter), median $(field "$s" median_sec_per_iter), min $(field "$s" min_sec_per_iter), peak_compute_bytes $(field "$s" peak_compute_bytes)"
    else
      tail_log 20
    fi
  done
  if [ "${rcs[0]}" != 0 ] || [ "${rcs[1]}" != 0 ]; then
    note "resnet56 cuda vs cpu" "FAIL (cuda exit ${rcs[0]}, cpu exit ${rcs[1]})"
    return
  fi
  [ "${rcs[2]}" = 0 ] || note "resnet56 cpu 1 thread (reference)" "FAIL (exit ${rcs[2]})"
  local table verdict
  table=$(cd "$work/logs" && awk -v threads="$(nproc)" '
    function rel(a, b,   x) { x = (a - b) / (a == 0 ? 1 : a); return x < 0 ? -x : x }
    FILENAME ~ /-cpu\.losses$/ { c[$1] = $2; if ($1 > n) n = $1; next }
    FILENAME ~ /-cuda\.losses$/ { g[$1] = $2; next }
    { t[$1] = $2 }
    END {
      printf "%5s %12s %12s %10s %12s %10s\n", "iter", "cpu loss", "cuda loss", "relative", "cpu 1 thr", "relative"
      ok = n > 0; worst = 0; ref = 0
      for (i = 1; i <= n; i++) {
        if (!(i in g)) { ok = 0; printf "%5d %12.6f %12s\n", i, c[i], "missing"; continue }
        r = rel(c[i], g[i]); if (r > worst) worst = r
        if ((i == 1 && r > 1e-4) || (i <= 3 && r > 1e-3)) ok = 0
        if (i == 1) first = r
        if (i in t) { q = rel(c[i], t[i]); if (q > ref) ref = q; printf "%5d %12.6f %12.6f %10.2e %12.6f %10.2e\n", i, c[i], g[i], r, t[i], q }
        else printf "%5d %12.6f %12.6f %10.2e %12s\n", i, c[i], g[i], r, "-"
      }
      printf "VERDICT %d iterations; cuda against cpu: first %.2e, largest %.2e relative (cpu 1 thread against %d: largest %.2e): %s\n",
        n, first, worst, threads, ref, (ok ? "PASS" : "FAIL") }' resnet56-cpu.losses resnet56-cuda.losses resnet56-cpu1.losses)
  md "" '```'
  grep -v '^VERDICT' <<<"$table" >>"$out" || true
  md '```'
  verdict=$(sed -n 's/^VERDICT //p' <<<"$table")
  say "- losses: $verdict"
  if [[ $verdict == *PASS ]]; then note "resnet56 cuda vs cpu" ok; else note "resnet56 cuda vs cpu" "FAIL ($verdict)"; fi
}

# field LINE KEY: the value of KEY=value in a summary line.
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# comm_figures: from mtc-bench-comm's output in $log, each collective's largest size and fit.
comm_figures() {
  md "" "The largest size of each collective and the fit:" '```'
  awk '/^# fit / { print last; print; next } NR == 1 || /^# [a-z]/ { print; next }
       /^# +size/ { if (!h) print; h = 1; next } NF > 3 { last = $0 }' "$log" | sed "s#$work#\$WORK#g" >>"$out"
  md '```'
}

nccl() {
  md "" "## 6. NCCL on one rank, without mpirun"
  md "A world of one needs no MPI: in a build without it comm/ sees one rank, and comm/nccl.cc makes" \
     "the ncclUniqueId itself and calls ncclCommInitRank(world 1); more ranks need MPI to share the id."
  run_step bench-comm-nccl 60 "$work/run/mtc-bench-comm" --backend=nccl --max_bytes=256MiB \
    --out="$work/logs/comm_model.nccl.json"
  note "mtc-bench-comm --backend nccl" "$(status_of "$rc")"
  if [ "$rc" != 0 ]; then
    tail_log 20
    md "" "Again with NCCL_DEBUG=INFO, 1 KiB only, for NCCL's own account of the failure:"
    run_step bench-comm-nccl-debug 30 env NCCL_DEBUG=INFO "$work/run/mtc-bench-comm" --backend=nccl \
      --max_bytes=1KiB --out="$work/logs/comm_model.debug.json"
  else
    comm_figures
    [ ! -f "$work/logs/comm_model.nccl.json" ] || { md "comm_model.json:" '```'; cat "$work/logs/comm_model.nccl.json" >>"$out"; md "" '```'; }
  fi
  tail_log 40
}

resnet50() {
  md "" "## 7. ResNet-50 beside PyTorch (benchmarks/resnet50_gpu.sh)"
  run_step resnet50-gpu 200 benchmarks/resnet50_gpu.sh "$work/run/mtc-train"
  note "resnet50_gpu.sh" "$(status_of "$rc")"
  if grep -qE '^(round|best|PASS|FAIL)' "$log"; then
    md "" '```'
    grep -E '^(round|best|[0-9]+ |PASS|FAIL)' "$log" >>"$out" || true
    md '```'
  fi
  tail_log 30
}

# dtp_gpu: DTP's cost model on one GPU (issue 16's "when a GPU is lent"): the 12-layer GPT
# and VGG-16 with --dtp=auto --dtp_report, one rank; the planner fits its rates to the
# warm-up's op times (CUDA events) and the report's summary gives each op's predicted and
# measured forward time, tabled by benchmarks/dtp_predict.sh --logs.
dtp_gpu() {
  md "" "## 8. DTP's cost model on one GPU (benchmarks/dtp_predict.sh --logs)"
  local d=$work/logs/dtp model args
  mkdir -p "$d"
  for model in gpt vgg16; do
    if [ "$model" = gpt ]; then
      args=(--model=gpt --gpt_config=small --seq=256 --batch=8 --optimizer=adamw --lr=1e-4)
    else
      args=(--model=vgg16 --batch=64 --optimizer=sgd --lr=1e-3 --momentum=0.9)
    fi
    run_step "dtp-$model" 90 "$work/run/mtc-train" "${args[@]}" --device=cuda --warmup=3 --iterations=5 \
      --log_every=1000 --dtp=auto --dtp_report
    cp "$log" "$d/$model-auto.txt"
    note "dtp auto $model (one GPU)" "$(status_of "$rc")"
    [ "$rc" = 0 ] || tail_log 20
  done
  run_step dtp-predict 30 benchmarks/dtp_predict.sh --logs "$d" --ranks 1 --modes auto
  # The 25% target is the issue's for 4 CPU ranks: here the figure is reported, not judged.
  case "$rc" in 0|1) note "dtp_predict.sh --logs (one GPU)" "ok (exit $rc: reported)" ;;
                *) note "dtp_predict.sh --logs (one GPU)" "$(status_of "$rc")" ;; esac
  md "" '```'
  grep -vE '^re-reading' "$log" | sed "s#$work#\$WORK#g" >>"$out" || true
  md '```'
}

# dte_gpu: DTE on the GPU: ResNet-50 at batch 128 (224x224) unlimited, then under budgets
# of 50% and 30% of that run's compute peak (DTE, mode both), and at 30% with TMA. Judged:
# every run trains and its compute peak stays within its budget; the time against the
# unlimited run's is reported (the swaps and recomputes it costs), not judged.
dte_gpu() {
  md "" "## 9. DTE on the GPU: ResNet-50, batch 128, under 50% and 30% of its peak"
  local flags=(--model=resnet50 --batch=128 --warmup=3 --iterations=8 --seed=0 --log_every=1000 --device=cuda)
  run_step dte-none 90 "$work/run/mtc-train" "${flags[@]}"
  if [ "$rc" != 0 ]; then
    note "dte on the gpu (unlimited run)" "$(status_of "$rc")"
    tail_log 20
    return
  fi
  local s0 peak0 t0s
  s0=$(grep '^summary ' "$log" | tail -n 1 || true)
  peak0=$(field "$s0" peak_compute_bytes)
  t0s=$(field "$s0" min_sec_per_iter)
  md "" '```'
  say "$(printf '%-10s %12s %12s %8s %12s %9s %9s %10s %10s %10s %12s' run "budget MiB" "peak MiB" ok "min s/iter" ratio drops swaps recomputes compact "final loss")"
  say "$(awk -v p="$peak0" -v t="$t0s" -v l="$(field "$s0" final_loss)" 'BEGIN { printf "%-10s %12s %12.1f %8s %12.4f %9.3f %9d %10d %10d %10d %12s", "none", "-", p / 1048576, "-", t, 1, 0, 0, 0, 0, l }')"
  local pct tma name args budget s ok all=1
  for run in 50 30 30tma; do
    pct=${run%tma}; name="dte-$run"; args=()
    [ "$run" = "$pct" ] || args=(--tma --tma_warmup=2)
    budget=$((peak0 * pct / 100))
    run_step "$name" 90 "$work/run/mtc-train" "${flags[@]}" --budget="${budget}B" "${args[@]}"
    if [ "$rc" != 0 ]; then
      all=0
      say "$(printf '%-10s %12.1f  FAIL (%s)' "$run%" "$(awk -v b="$budget" 'BEGIN { print b / 1048576 }')" "$(status_of "$rc")")"
      continue
    fi
    s=$(grep '^summary ' "$log" | tail -n 1 || true)
    ok=yes
    [ "$(field "$s" peak_compute_bytes)" -le "$budget" ] || { ok=no; all=0; }
    say "$(awk -v r="$run%" -v b="$budget" -v p="$(field "$s" peak_compute_bytes)" -v ok="$ok" \
      -v t="$(field "$s" min_sec_per_iter)" -v t0="$t0s" -v d="$(field "$s" evict_drop)" -v w="$(field "$s" evict_swap)" \
      -v rc="$(field "$s" recomputes)" -v c="$(field "$s" compactions)" -v l="$(field "$s" final_loss)" \
      'BEGIN { printf "%-10s %12.1f %12.1f %8s %12.4f %9.3f %9d %10d %10d %10d %12s", r, b / 1048576, p / 1048576, ok, t, t / t0, d, w, rc, c, l }')"
  done
  md '```'
  if [ "$all" = 1 ]; then note "dte on the gpu (resnet50, 50% and 30%)" ok; else note "dte on the gpu (resnet50, 50% and 30%)" "FAIL (a run failed or passed its budget)"; tail_log 20; fi
}

# projection_gpu: DTP's GPU projection (benchmarks/dtp_gpu_projection: the cost model fed
# with H100 SXM figures, stated in that program) against this GPU: its one-GPU data-parallel
# time per iteration at fp32 rates for GPT-2 small and the 24-layer, D 1024 GPT at 8
# sequences of 1024, beside mtc-train's least s/iter of the same model here (fp32, TF32
# off, AdamW, 2 + 4 iterations). Reported, not judged: the figures are an H100's, this GPU
# may be an H200 (the same FP32 rate, more HBM bandwidth).
projection_gpu() {
  md "" "## 12. DTP's GPU projection against one GPU"
  if [ ! -x "$work/run/dtp_gpu_projection" ]; then
    say "- no dtp_gpu_projection among the binaries: not run"
    note "dtp projection against one gpu" "FAIL (no dtp_gpu_projection)"
    return
  fi
  run_step projection 30 "$work/run/dtp_gpu_projection" --gpus 1 --batch_per_gpu 8
  if [ "$rc" != 0 ]; then
    note "dtp projection against one gpu" "$(status_of "$rc")"
    tail_log 20
    return
  fi
  local proj=$log name pred args s meas all=1
  md "" '```'
  say "$(printf '%-40s %16s %16s %10s' model "predicted s/it" "measured s/it" "meas/pred")"
  for name in "12-layer" "24-layer"; do
    # The fp32 table's row of this model at 8 sequences per GPU: "NAME (...) 8 8 | dp_us ...".
    pred=$(awk -v m="$name" '/^== fp32/ { on = 1; next } /^== / { on = 0 } on && index($0, m) == 1 {
             split($0, f, "|"); split(f[1], a, " "); if (a[length(a) - 1] == 8) { split(f[2], b, " "); print b[1]; exit } }' "$proj")
    if [ "$name" = 12-layer ]; then
      args=(--gpt_config=small --seq=1024)
    else
      args=(--gpt_config=small --layers=24 --hidden=1024 --heads=16 --seq=1024)
    fi
    run_step "projection-$name" 120 "$work/run/mtc-train" --model=gpt "${args[@]}" --batch=8 --optimizer=adamw \
      --lr=1e-4 --warmup=2 --iterations=4 --seed=0 --log_every=1000 --device=cuda
    s=$(grep '^summary ' "$log" | tail -n 1 || true)
    meas=$(field "$s" min_sec_per_iter)
    if [ "$rc" != 0 ] || [ -z "$meas" ] || [ -z "$pred" ]; then
      all=0
      say "$(printf '%-40s %16s  FAIL (%s)' "$name" "${pred:-?}" "$(status_of "$rc")")"
      continue
    fi
    say "$(awk -v n="$name" -v p="$pred" -v m="$meas" 'BEGIN { printf "%-40s %16.4f %16.4f %10.3f", n, p / 1e6, m, m / (p / 1e6) }')"
  done
  md '```'
  if [ "$all" = 1 ]; then note "dtp projection against one gpu" "ok (reported)"; else note "dtp projection against one gpu" "FAIL (a run failed)"; tail_log 20; fi
}

# nccl_training: training through the NCCL plug-in on one rank, each run beside the same
# run without it: ResNet-20 with synchronised batch norm (its statistics all-reduced), and
# the GPT under DTP's mode p1 on a group of one (its conversions and gradient reductions
# as NCCL collectives). Judged: every run trains; the losses side by side are reported.
nccl_training() {
  md "" "## 10. Training through NCCL on one rank"
  local pair name a b
  for pair in resnet20 gpt; do
    if [ "$pair" = resnet20 ]; then
      a=(--model=resnet20 --batch=64 --warmup=1 --iterations=5 --seed=0 --lr=0.01 --log_every=1 --device=cuda)
      b=(--sync_bn --comm_backend=nccl)
    else
      a=(--model=gpt --gpt_config=small --seq=128 --batch=8 --optimizer=adamw --lr=1e-4 --warmup=1 --iterations=5
         --seed=0 --log_every=1 --device=cuda)
      b=(--dtp=p1 --comm_backend=nccl)
    fi
    run_step "nccl-$pair-plain" 60 "$work/run/mtc-train" "${a[@]}"
    local rc0=$rc; losses "$log" >"$work/logs/nccl-$pair-plain.losses"
    [ "$rc" = 0 ] || tail_log 15
    run_step "nccl-$pair" 60 "$work/run/mtc-train" "${a[@]}" "${b[@]}"
    losses "$log" >"$work/logs/nccl-$pair.losses"
    [ "$rc" = 0 ] || tail_log 20
    md "" "$pair, $(show "${b[@]}") against without:" '```'
    (cd "$work/logs" && awk '
      function rel(a, b,   x) { x = (a - b) / (a == 0 ? 1 : a); return x < 0 ? -x : x }
      FILENAME ~ /plain/ { p[$1] = $2; next } { q[$1] = $2; if ($1 > n) n = $1 }
      END { printf "%5s %12s %12s %10s\n", "iter", "without", "nccl", "relative"
            for (i = 1; i <= n; i++) printf "%5d %12s %12s %10.2e\n", i, p[i], q[i], rel(p[i], q[i]) }' \
      "nccl-$pair-plain.losses" "nccl-$pair.losses") >>"$out" || true
    md '```'
    if [ "$rc0" = 0 ] && [ "$rc" = 0 ] && [ -s "$work/logs/nccl-$pair.losses" ]; then
      note "training through nccl ($pair)" ok
    else
      note "training through nccl ($pair)" "FAIL (without: $(status_of "$rc0"); with: $(status_of "$rc"))"
    fi
  done
}

# tma_gpu: TMA on the GPU, where its packing at the boundary (Note [Packing at the boundary]
# in alloc/tma.cc) moves parameters and optimizer state with copies within the device: a
# 48-layer GPT (hidden 64, seq 64, batch 8) with and without --tma. Judged: the losses bit
# for bit equal, and with TMA the high water at most 1.01x the peak of live bytes.
tma_gpu() {
  md "" "## 11. TMA on the GPU: a 48-layer GPT with and without --tma"
  local a=(--model=gpt --layers=48 --hidden=64 --heads=4 --seq=64 --batch=8 --warmup=3 --iterations=3 --seed=0
           --log_every=1 --device=cuda) s0 s1 rc0
  run_step tma-off 60 "$work/run/mtc-train" "${a[@]}"
  rc0=$rc; s0=$(grep '^summary ' "$log" | tail -n 1 || true); losses "$log" >"$work/logs/tma-off.losses"
  [ "$rc" = 0 ] || tail_log 15
  run_step tma-on 60 "$work/run/mtc-train" "${a[@]}" --tma --tma_warmup=2
  s1=$(grep '^summary ' "$log" | tail -n 1 || true); losses "$log" >"$work/logs/tma-on.losses"
  [ "$rc" = 0 ] || tail_log 15
  if [ "$rc0" != 0 ] || [ "$rc" != 0 ]; then
    note "tma on the gpu" "FAIL (without: $(status_of "$rc0"); with: $(status_of "$rc"))"
    return
  fi
  local same=no ratio0 ratio1
  cmp -s "$work/logs/tma-off.losses" "$work/logs/tma-on.losses" && same=yes
  ratio0=$(awk -v h="$(field "$s0" high_water_compute_bytes)" -v p="$(field "$s0" peak_compute_bytes)" 'BEGIN { printf "%.4f", h / p }')
  ratio1=$(awk -v h="$(field "$s1" high_water_compute_bytes)" -v p="$(field "$s1" peak_compute_bytes)" 'BEGIN { printf "%.4f", h / p }')
  say "- high water / peak: ${ratio0}x without TMA, ${ratio1}x with (compactions $(field "$s1" compactions), moved $(field "$s1" moved_bytes) bytes, $(field "$s1" tma_hits) hits, $(field "$s1" tma_misses) misses); losses the same: $same; min s/iter $(field "$s0" min_sec_per_iter) without, $(field "$s1" min_sec_per_iter) with"
  if [ "$same" = yes ] && awk -v r="$ratio1" 'BEGIN { exit !(r <= 1.01) }'; then
    note "tma on the gpu (packing, bit for bit)" ok
  else
    note "tma on the gpu (packing, bit for bit)" "FAIL (losses the same: $same; high water ${ratio1}x)"
  fi
}

no_gpu_steps() {
  md "" "## 4. Without a GPU: what runs anyway"
  local b
  for b in "$work"/bin/*_test; do
    [ -e "$b" ] || continue
    md "" "### ${b##*/}"
    run_step "${b##*/}" 120 "$work/run/${b##*/}" --gtest_color=no
    gtest_figures
    note "${b##*/} (no GPU)" "$(status_of "$rc")"
    tail_log 15
  done
  md "" "### mtc-train --device cuda without a GPU: a clear error, not a crash"
  run_step resnet56-cuda-nogpu 60 "$work/run/mtc-train" --model=resnet56 --batch=8 --iterations=1 --warmup=0 --device=cuda
  if [ "$rc" = 2 ] && grep -qi 'gpu' "$log"; then
    say "- exit 2 with: $(grep -i 'gpu' "$log" | head -n 1)"
    note "mtc-train --device cuda (no GPU)" "ok (a clear error)"
  else
    note "mtc-train --device cuda (no GPU)" "FAIL (exit $rc, expected 2 with a message about the GPU)"
  fi
  tail_log 5
  md "" "### mtc-bench-comm on the local backend"
  run_step bench-comm-local 60 "$work/run/mtc-bench-comm" --backend=local --max_bytes=1MiB --iters=5 \
    --out="$work/logs/comm_model.local.json"
  note "mtc-bench-comm --backend local" "$(status_of "$rc")"
  if [ "$rc" = 0 ]; then comm_figures; else tail_log 10; fi
}

check() {
  out=$1; shift
  bundle_dir=build-gpu-bundle build_dir=build-gpu deadline=540
  local all_steps=(tests resnet56 nccl resnet50 dtp dte nccl-training tma projection) steps=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --bundle|--build|--deadline|--steps)
        [ $# -ge 2 ] || { echo "gpu-check.sh: $1 needs a value" >&2; exit 2; }
        case "$1" in --bundle) bundle_dir=$2 ;; --build) build_dir=$2 ;; --deadline) deadline=$2 ;; --steps) steps=$2 ;; esac
        shift 2 ;;
      *) echo "gpu-check.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
  done
  if [[ ! $deadline =~ ^[0-9]+$ ]] || [ "$deadline" -lt 60 ]; then
    echo "gpu-check.sh: --deadline must be a number of seconds >= 60" >&2
    exit 2
  fi
  [ -n "$steps" ] || steps=$(IFS=,; echo "${all_steps[*]}")
  local st
  for st in ${steps//,/ }; do
    [[ " ${all_steps[*]} " == *" $st "* ]] ||
      { echo "gpu-check.sh: --steps: unknown step '$st'; expected a comma-separated list of: $(IFS=,; echo "${all_steps[*]}")" >&2; exit 2; }
  done
  # want STEP: whether --steps names STEP.
  want() { [[ ",$steps," == *",$1,"* ]]; }
  t0=$SECONDS
  mkdir -p "$(dirname "$out")"
  out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
  work=$(mktemp -d /tmp/mtc-gpu-check.XXXXXX)
  mkdir -p "$work/logs"
  trap 'tar -C "$work" -czf "$out.logs.tar.gz" logs 2>/dev/null || true; rm -rf "$work"' EXIT
  : >"$out"
  say "# mtc GPU check"
  md "" "\`scripts/gpu-check.sh\` from $(git rev-parse --short HEAD 2>/dev/null || echo "a tree without git"), $(date -u '+%Y-%m-%d %H:%M UTC');" \
     "deadline $deadline s; steps $steps; \$WORK is the scratch folder; full logs in $(basename "$out").logs.tar.gz." ""
  machine
  local gpu=0
  if have_gpu; then gpu=1; fi
  if get_binaries; then
    say "- binaries from $source_of_binaries"
    check_libraries
    startup
    if [ "$gpu" = 1 ]; then
      if want tests; then gpu_tests 120 180; fi
      if want resnet56; then resnet56; fi
      if want nccl; then nccl; fi
      if want resnet50; then resnet50; fi
      if want dtp; then dtp_gpu; fi
      if want dte; then dte_gpu; fi
      if want nccl-training; then nccl_training; fi
      if want tma; then tma_gpu; fi
      if want projection; then projection_gpu; fi
    else
      say "" "no GPU found: skipping the GPU steps"
      no_gpu_steps
    fi
  else
    say "- no binaries: the steps that need them are not run"
    note "binaries" "FAIL (none)"
    [ "$gpu" = 1 ] || say "" "no GPU found: skipping the GPU steps"
  fi
  md "" "## Summary"
  say "" "| step | status |" "|---|---|"
  local s
  for s in "${summary[@]}"; do say "| ${s%%: *} | ${s#*: } |"; done
  say "" "total: $((SECONDS - t0)) s; $( [ "$failed" = 0 ] && echo "every step that ran passed" || echo "a step FAILED")"
  [ "$failed" = 0 ]
}

case "${1:-}" in
  ""|-h|--help) usage; [ -n "${1:-}" ] || exit 2; exit 0 ;;
  --prepare) shift; prepare "$@" ;;
  -*) echo "gpu-check.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
  *) check "$@" ;;
esac
