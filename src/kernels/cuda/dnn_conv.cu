// CUDA kernel of conv2d's bias add: y (N, OC, OH, OW) += bias per output channel, after
// cuDNN's convolution has written y (conv.cc).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dnn_conv_launch.h"
#include "kernels/cuda/launch.h"

namespace mtc::cuda {
namespace {

constexpr int kThreads = 256;

// I is uint32_t below 2^31 values (cheaper divisions), else int64_t.
template <typename I>
__global__ void add_channel_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, I total, I c,
                                        I s) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride)
    y[e] += bias[(e / s) % c];
}

}  // namespace

void launch_add_channel_bias(float* y, const float* bias, int64_t n, int64_t c, int64_t s,
                             cudaStream_t stream) {
  const int64_t total = n * c * s;
  if (total <= 0) return;
  if (total < (int64_t{1} << 31)) {
    add_channel_bias_kernel<uint32_t><<<blocks(total, kThreads), kThreads, 0, stream>>>(
        y, bias, static_cast<uint32_t>(total), static_cast<uint32_t>(c), static_cast<uint32_t>(s));
  } else {
    add_channel_bias_kernel<int64_t><<<blocks(total, kThreads), kThreads, 0, stream>>>(y, bias, total, c, s);
  }
}

}  // namespace mtc::cuda
