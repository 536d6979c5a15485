// Launchers of the pooling kernels (dnn_pool.cu) on NCHW float tensors, viewed as
// `planes` = N * C planes of (h, w) in and (oh, ow) out. Windows, tie-breaking and the
// order of every float sum are the CPU kernels' (src/kernels/cpu/pool.cc), so results
// match them bit for bit: each output (forward) or input element (backward, a gather over
// the windows covering it, in window order) is computed by one thread, with no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

// PoolGeometry: the pooling problem; padding reads as -infinity (max) or 0 (average).
struct PoolGeometry {
  int64_t planes, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw;
};

// launch_max_pool2d: y = the maximum of each window (NaN wins, the last one in row-major
// order, as the CPU kernel's scan leaves it).
void launch_max_pool2d(const float* x, float* y, const PoolGeometry& g, cudaStream_t stream);
// launch_max_pool2d_argmax: for each output, the offset within its (h, w) plane of the
// window's first maximum (row-major; NaN as above). Needs h * w < 2^31.
void launch_max_pool2d_argmax(const float* x, int32_t* argmax, const PoolGeometry& g, cudaStream_t stream);
// launch_max_pool2d_backward: dx = for each input element, the sum of dy over the windows
// whose argmax it is, added in window order from 0 (as the CPU kernel's scatter adds).
void launch_max_pool2d_backward(const int32_t* argmax, const float* dy, float* dx, const PoolGeometry& g,
                                cudaStream_t stream);
// launch_avg_pool2d: y = (the float sum of the window's inputs, row-major) * inv, where
// inv = 1.0f / (kh * kw) (count_include_pad).
void launch_avg_pool2d(const float* x, float* y, const PoolGeometry& g, float inv, cudaStream_t stream);
// launch_avg_pool2d_backward: dx = the sum over the windows covering each input element
// of dy * inv, added in window order from 0.
void launch_avg_pool2d_backward(const float* dy, float* dx, const PoolGeometry& g, float inv,
                                cudaStream_t stream);
// launch_global_avg_pool: y[p] = (the double sum of plane p's hw values) * inv, rounded
// once to float (inv = 1.0 / hw in double).
void launch_global_avg_pool(const float* x, float* y, int64_t planes, int64_t hw, double inv,
                            cudaStream_t stream);

}  // namespace mtc::cuda
