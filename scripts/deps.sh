# scripts/deps.sh: what run.sh and test.sh share. Source it, then call
#   mtc_install_deps [--torch]   apt-get install the Debian packages mtc needs that are missing
#                                (--torch adds python3-torch and python3-torchvision, for the
#                                PyTorch peers in benchmarks/ and tests/torch_checkpoint.sh);
#                                with everything present it changes nothing and needs no network
#   mtc_build DIR [CMAKE ARGS]   configure DIR with Ninja and build it (MTC_JOBS jobs, default nproc)
# Run directly (scripts/deps.sh [--torch]) it just installs.

# ocl-icd-opencl-dev: Debian's libdnnl-dev ships a dnnl-config.cmake that calls
# find_package(OpenCL), and only Recommends the package that satisfies it; with
# --no-install-recommends configure fails on a fresh machine without it.
MTC_DEPS=(cmake ninja-build g++ libabsl-dev libgtest-dev libbenchmark-dev libopenblas-dev
          libopenblas-openmp-dev libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libopenmpi-dev
          openmpi-bin)
MTC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

mtc_install_deps() {
  local pkgs=("${MTC_DEPS[@]}") missing=() p
  [ "${1:-}" = --torch ] && pkgs+=(python3-torch python3-torchvision)
  if ! command -v dpkg >/dev/null 2>&1; then
    echo "deps: no dpkg here (not Debian?); make sure these are installed: ${pkgs[*]}" >&2
    return 0
  fi
  for p in "${pkgs[@]}"; do
    grep -q '^Status: install ok installed' <<<"$(dpkg -s "$p" 2>/dev/null)" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "deps: missing ${missing[*]}, and this is neither root nor has sudo" >&2
      return 1
    fi
    sudo=(sudo)
  fi
  echo "deps: installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${missing[@]}" || return 1
}

mtc_build() {
  local dir=$1
  shift
  cmake -S "$MTC_ROOT" -B "$dir" -G Ninja "$@" || return 1
  cmake --build "$dir" -j "${MTC_JOBS:-$(nproc)}" || return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  mtc_install_deps "$@"
fi
