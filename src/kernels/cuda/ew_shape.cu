// The data-movement CUDA kernels behind ew_shape_launch.h: slab copies along one dim
// (concat, split, slice), the zero-padded copy of slice_backward, and channel_shuffle.
// One thread per destination element in a grid-stride loop, so writes are coalesced;
// index arithmetic in 32 bits when the element count allows (cheaper division).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ew_shape_launch.h"
#include "kernels/cuda/launch.h"

namespace mtc::cuda {
namespace {

constexpr int kThreads = 256;

inline bool fits32(int64_t n) { return n < (int64_t{1} << 31); }

// copy_along_dim_kernel: element i of the n = outer * len * inner copied ones.
template <typename I>
__global__ void copy_along_dim_kernel(const uint32_t* __restrict__ src, int64_t src_dim, int64_t src_off,
                                      uint32_t* __restrict__ dst, int64_t dst_dim, int64_t dst_off,
                                      int64_t len, int64_t inner, int64_t n) {
  const I run = static_cast<I>(len * inner);  // contiguous elements per outer index
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I o = static_cast<I>(i) / run;
    const I r = static_cast<I>(i) - o * run;
    dst[(static_cast<int64_t>(o) * dst_dim + dst_off) * inner + r] =
        src[(static_cast<int64_t>(o) * src_dim + src_off) * inner + r];
  }
}

// pad_along_dim_kernel: element i of dst, n = outer * dst_dim * inner.
template <typename I>
__global__ void pad_along_dim_kernel(const uint32_t* __restrict__ src, int64_t len,
                                     uint32_t* __restrict__ dst, int64_t dst_dim, int64_t start,
                                     int64_t inner, int64_t n) {
  const I in = static_cast<I>(inner), dd = static_cast<I>(dst_dim);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I q = static_cast<I>(i) / in;
    const I r = static_cast<I>(i) - q * in;
    const I o = q / dd;
    const int64_t k = static_cast<int64_t>(q - o * dd) - start;  // index along the dim, in src
    dst[i] = k >= 0 && k < len ? src[(static_cast<int64_t>(o) * len + k) * inner + r] : 0u;
  }
}

// channel_shuffle_kernel: element i of y, n = batch * c * inner; reads the x channel that
// lands on y's channel `to` = j * groups + i (x channel i * k + j).
template <typename I>
__global__ void channel_shuffle_kernel(const uint32_t* __restrict__ x, uint32_t* __restrict__ y, int64_t c,
                                       int64_t inner, int64_t groups, int64_t n) {
  const I in = static_cast<I>(inner), cc = static_cast<I>(c), g = static_cast<I>(groups);
  const I k = cc / g;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I plane = static_cast<I>(i) / in;
    const I r = static_cast<I>(i) - plane * in;
    const I b = plane / cc;
    const I to = plane - b * cc;  // = j * groups + gi
    const I j = to / g, gi = to - j * g;
    const I from = gi * k + j;
    y[i] = x[(static_cast<int64_t>(b) * c + from) * inner + r];
  }
}

}  // namespace

void launch_copy_along_dim32(const void* src, int64_t src_dim, int64_t src_off, void* dst, int64_t dst_dim,
                             int64_t dst_off, int64_t outer, int64_t len, int64_t inner,
                             cudaStream_t stream) {
  const int64_t n = outer * len * inner;
  if (n <= 0) return;
  const auto* s = static_cast<const uint32_t*>(src);
  auto* d = static_cast<uint32_t*>(dst);
  if (fits32(n)) {
    copy_along_dim_kernel<uint32_t><<<blocks(n, kThreads), kThreads, 0, stream>>>(
        s, src_dim, src_off, d, dst_dim, dst_off, len, inner, n);
  } else {
    copy_along_dim_kernel<uint64_t><<<blocks(n, kThreads), kThreads, 0, stream>>>(
        s, src_dim, src_off, d, dst_dim, dst_off, len, inner, n);
  }
}

void launch_pad_along_dim32(const void* src, int64_t len, void* dst, int64_t dst_dim, int64_t start,
                            int64_t outer, int64_t inner, cudaStream_t stream) {
  const int64_t n = outer * dst_dim * inner;
  if (n <= 0) return;
  const auto* s = static_cast<const uint32_t*>(src);
  auto* d = static_cast<uint32_t*>(dst);
  if (fits32(n)) {
    pad_along_dim_kernel<uint32_t>
        <<<blocks(n, kThreads), kThreads, 0, stream>>>(s, len, d, dst_dim, start, inner, n);
  } else {
    pad_along_dim_kernel<uint64_t>
        <<<blocks(n, kThreads), kThreads, 0, stream>>>(s, len, d, dst_dim, start, inner, n);
  }
}

void launch_channel_shuffle32(const void* x, void* y, int64_t n, int64_t c, int64_t inner, int64_t groups,
                              cudaStream_t stream) {
  const int64_t total = n * c * inner;
  if (total <= 0 || groups <= 0) return;
  const auto* px = static_cast<const uint32_t*>(x);
  auto* py = static_cast<uint32_t*>(y);
  if (fits32(total)) {
    channel_shuffle_kernel<uint32_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(px, py, c, inner, groups, total);
  } else {
    channel_shuffle_kernel<uint64_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(px, py, c, inner, groups, total);
  }
}

}  // namespace mtc::cuda
