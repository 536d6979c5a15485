// Launchers of conv2d's small companion kernels (dnn_conv.cu); the convolutions
// themselves are cuDNN's (conv.cc), the bias gradient is launch_channel_sum
// (dnn_norm_launch.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

// launch_add_channel_bias: y (n, c, s) += bias[c] for every value of channel c.
void launch_add_channel_bias(float* y, const float* bias, int64_t n, int64_t c, int64_t s,
                             cudaStream_t stream);

}  // namespace mtc::cuda
