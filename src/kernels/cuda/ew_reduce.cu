// The CUDA sum reduction behind ew_reduce_launch.h. Each output's elements are cut into
// chunks fixed by the shape (reduce_plan); a warp (contiguous rows) or a thread (strided
// columns) sums a chunk in double in a fixed order, the warp's lanes combined by a fixed
// shuffle tree; with several chunks a second kernel adds the partial sums in chunk order.
// So the result depends on the shape alone, never on the grid or on timing.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ew_reduce_launch.h"
#include "kernels/cuda/launch.h"

namespace mtc::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

// offset_of: the offset of row-major index i over n dims (innermost first in size and
// stride). The outermost dim needs no division (i is already below its size).
template <typename I>
__device__ __forceinline__ int64_t offset_of(I i, int n, const int64_t* size, const int64_t* stride) {
  int64_t off = 0;
#pragma unroll
  for (int d = 0; d < kMaxReduceDims; ++d) {
    if (d >= n) break;
    if (d == n - 1) {
      off += static_cast<int64_t>(i) * stride[d];
      break;
    }
    const I sz = static_cast<I>(size[d]);
    const I q = i / sz;
    off += static_cast<int64_t>(i - q * sz) * stride[d];
    i = q;
  }
  return off;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(0xffffffffu, v, s);
  return v;  // lane 0 holds the sum
}

// Work item = chunk * n_out + output: neighbouring warps / threads take neighbouring outputs.
template <typename I>
__global__ void reduce_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   double* __restrict__ part, ReduceGeom g, int64_t n_out, int64_t n_red,
                                   int64_t chunks, int64_t len, double scale) {
  const int lane = threadIdx.x & 31;
  const int64_t items = n_out * chunks;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); item < items;
       item += step) {  // the same item for the whole warp: the loop is warp-uniform
    const int64_t c = item / n_out;
    const int64_t o = item - c * n_out;
    const int64_t base = offset_of<I>(static_cast<I>(o), g.nk, g.ksize, g.kstride);
    const int64_t r1 = min(n_red, (c + 1) * len);
    double acc = 0;
    for (int64_t r = c * len + lane; r < r1; r += 32) {
      acc += static_cast<double>(x[base + offset_of<I>(static_cast<I>(r), g.nr, g.rsize, g.rstride)]);
    }
    acc = warp_sum(acc);
    if (lane == 0) {
      if (chunks == 1) {
        y[o] = static_cast<float>(acc * scale);
      } else {
        part[item] = acc;
      }
    }
  }
}

template <typename I>
__global__ void reduce_cols_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   double* __restrict__ part, ReduceGeom g, int64_t n_out, int64_t n_red,
                                   int64_t chunks, int64_t len, double scale) {
  const int64_t items = n_out * chunks;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = item / n_out;
    const int64_t o = item - c * n_out;
    const int64_t base = offset_of<I>(static_cast<I>(o), g.nk, g.ksize, g.kstride);
    const int64_t r1 = min(n_red, (c + 1) * len);
    double acc = 0;
    for (int64_t r = c * len; r < r1; ++r) {
      acc += static_cast<double>(x[base + offset_of<I>(static_cast<I>(r), g.nr, g.rsize, g.rstride)]);
    }
    if (chunks == 1) {
      y[o] = static_cast<float>(acc * scale);
    } else {
      part[item] = acc;
    }
  }
}

// reduce_finish_kernel: a warp per output adds its chunks' partial sums (lane l takes
// chunks l, l + 32, ...; then the fixed shuffle tree).
__global__ void reduce_finish_kernel(const double* __restrict__ part, float* __restrict__ y, int64_t n_out,
                                     int64_t chunks, double scale) {
  const int lane = threadIdx.x & 31;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); o < n_out;
       o += step) {
    double acc = 0;
    for (int64_t c = lane; c < chunks; c += 32) acc += part[c * n_out + o];
    acc = warp_sum(acc);
    if (lane == 0) y[o] = static_cast<float>(acc * scale);
  }
}

template <typename I>
void launch_as(const float* x, float* y, const ReduceGeom& g, int64_t n_out, int64_t n_red,
               const ReducePlan& p, double scale, double* part, cudaStream_t stream) {
  const int64_t items = n_out * p.chunks;
  if (p.rows) {
    reduce_rows_kernel<I><<<blocks(items * 32, kThreads), kThreads, 0, stream>>>(x, y, part, g, n_out, n_red,
                                                                                 p.chunks, p.len, scale);
  } else {
    reduce_cols_kernel<I><<<blocks(items, kThreads), kThreads, 0, stream>>>(x, y, part, g, n_out, n_red,
                                                                            p.chunks, p.len, scale);
  }
}

}  // namespace

void launch_reduce_sum(const float* x, float* y, const ReduceGeom& g, int64_t n_out, int64_t n_red,
                       const ReducePlan& p, double scale, void* scratch, cudaStream_t stream) {
  if (n_out <= 0 || n_red <= 0) return;
  auto* part = static_cast<double*>(scratch);
  constexpr int64_t k32 = int64_t{1} << 31;
  if (n_out < k32 && n_red < k32) {
    launch_as<uint32_t>(x, y, g, n_out, n_red, p, scale, part, stream);
  } else {
    launch_as<uint64_t>(x, y, g, n_out, n_red, p, scale, part, stream);
  }
  if (p.chunks > 1) {
    reduce_finish_kernel<<<blocks(n_out * 32, kThreads), kThreads, 0, stream>>>(part, y, n_out, p.chunks,
                                                                                scale);
  }
}

}  // namespace mtc::cuda
