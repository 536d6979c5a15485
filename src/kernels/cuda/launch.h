// Launchers of the CUDA kernels (.cu files): plain functions on raw pointers, callable
// from host code without CUDA's compiler. Each enqueues on `stream` and returns at once;
// the caller checks the launch with cuda::last_launch. Grouped by the .cu file defining
// them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

// blocks: a grid of `threads`-thread blocks covering n elements (at most 65535 * 32 blocks;
// the kernels loop with a grid stride).
inline unsigned blocks(int64_t n, int threads = 256) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b > 2097120 ? 2097120 : b);
}

}  // namespace mtc::cuda
