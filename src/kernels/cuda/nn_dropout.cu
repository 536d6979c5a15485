// dropout's kernel: the mask is a pure function of (seed, element index), so each thread
// draws its elements' bits independently, and the mask equals the CPU's bit for bit.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn_dropout_launch.h"

namespace mtc::cuda {
namespace {

// draw: ops/dropout.h's dropout_draw, line for line (that header cannot be compiled by
// nvcc: it pulls in abseil): splitmix64 at position i of the stream `seed`, top 32 bits.
// The CUDA tests compare the masks bit for bit, so a change there must be made here too.
__device__ __forceinline__ uint32_t draw(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
}

__global__ void dropout_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, uint64_t seed,
                               uint64_t threshold, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = draw(seed, static_cast<uint64_t>(i)) >= threshold ? x[i] * scale : 0.f;
  }
}

}  // namespace

void launch_dropout(const float* x, float* y, int64_t n, uint64_t seed, uint64_t threshold, float scale,
                    cudaStream_t stream) {
  if (n <= 0) return;
  dropout_kernel<<<blocks(n), 256, 0, stream>>>(x, y, n, seed, threshold, scale);
}

}  // namespace mtc::cuda
