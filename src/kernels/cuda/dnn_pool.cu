// CUDA kernels of max_pool2d, avg_pool2d (count_include_pad), their gradients and
// global_avg_pool. One thread per output element forward; one per input element backward,
// gathering from the windows that cover it in the CPU kernels' window order, so sums come
// out bit-identical to the CPU's and no atomics are needed (see dnn_pool_launch.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dnn_pool_launch.h"
#include "kernels/cuda/launch.h"

namespace mtc::cuda {
namespace {

constexpr int kThreads = 256;

// Window: output (i, j)'s window clipped to the plane, [h0, h1) x [w0, w1) (never empty:
// padding is at most half the kernel).
struct Window {
  int h0, h1, w0, w1;
};
__device__ Window window_of(const PoolGeometry& g, int i, int j) {
  const int hs = i * g.sh - g.ph, ws = j * g.sw - g.pw;
  const int h = static_cast<int>(g.h), w = static_cast<int>(g.w);
  return {hs > 0 ? hs : 0, hs + g.kh < h ? hs + g.kh : h, ws > 0 ? ws : 0, ws + g.kw < w ? ws + g.kw : w};
}

// Covering: the outputs whose windows contain input (r, c): rows [i0, i1], cols [j0, j1]
// (empty when i0 > i1 or j0 > j1). Output i covers r when i*sh - ph <= r < i*sh - ph + kh.
struct Covering {
  int i0, i1, j0, j1;
};
__device__ Covering covering_of(const PoolGeometry& g, int r, int c) {
  const int a = r + g.ph - g.kh, b = c + g.pw - g.kw;  // i*sh > a; j*sw > b
  const int i0 = a < 0 ? 0 : a / g.sh + 1, j0 = b < 0 ? 0 : b / g.sw + 1;
  int i1 = (r + g.ph) / g.sh, j1 = (c + g.pw) / g.sw;
  if (i1 > g.oh - 1) i1 = static_cast<int>(g.oh - 1);
  if (j1 > g.ow - 1) j1 = static_cast<int>(g.ow - 1);
  return {i0, i1, j0, j1};
}

// argmax_in: offset in the plane of the window's first maximum, scanning row-major; a NaN
// always takes over (v != v), as the CPU kernel's `v > m || isnan(v)`.
__device__ int argmax_in(const float* xp, int w, const Window& win) {
  int best = win.h0 * w + win.w0;
  float m = -__int_as_float(0x7f800000);  // -infinity
  for (int r = win.h0; r < win.h1; ++r)
    for (int c = win.w0; c < win.w1; ++c) {
      const float v = xp[r * w + c];
      if (v > m || v != v) {
        m = v;
        best = r * w + c;
      }
    }
  return best;
}

// Flat index e over (planes, rows, cols) split into its parts. I is uint32_t when every
// flat index of the problem is below 2^31, else int64_t (cheaper divisions when it can).
template <typename I>
struct Split {
  I p;
  int r, c;
};
template <typename I>
__device__ Split<I> split(I e, I rows, I cols) {
  const I plane = rows * cols;
  const I p = e / plane, rem = e - p * plane;
  const I r = rem / cols;
  return {p, static_cast<int>(r), static_cast<int>(rem - r * cols)};
}

template <typename I>
__global__ void max_pool_kernel(const float* __restrict__ x, float* __restrict__ y, PoolGeometry g, I total) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  const I oh = static_cast<I>(g.oh), ow = static_cast<I>(g.ow), hw = static_cast<I>(g.h * g.w);
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const Split<I> s = split<I>(e, oh, ow);
    const float* xp = x + s.p * hw;
    y[e] = xp[argmax_in(xp, static_cast<int>(g.w), window_of(g, s.r, s.c))];
  }
}

template <typename I>
__global__ void max_pool_argmax_kernel(const float* __restrict__ x, int32_t* __restrict__ argmax,
                                       PoolGeometry g, I total) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  const I oh = static_cast<I>(g.oh), ow = static_cast<I>(g.ow), hw = static_cast<I>(g.h * g.w);
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const Split<I> s = split<I>(e, oh, ow);
    argmax[e] = argmax_in(x + s.p * hw, static_cast<int>(g.w), window_of(g, s.r, s.c));
  }
}

template <typename I>
__global__ void max_pool_backward_kernel(const int32_t* __restrict__ argmax, const float* __restrict__ dy,
                                         float* __restrict__ dx, PoolGeometry g, I total) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  const I h = static_cast<I>(g.h), w = static_cast<I>(g.w), ohw = static_cast<I>(g.oh * g.ow);
  const int ow = static_cast<int>(g.ow);
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const Split<I> s = split<I>(e, h, w);
    const int32_t self = s.r * static_cast<int>(g.w) + s.c;
    const int32_t* ap = argmax + s.p * ohw;
    const float* dyp = dy + s.p * ohw;
    const Covering cov = covering_of(g, s.r, s.c);
    float acc = 0.f;
    for (int i = cov.i0; i <= cov.i1; ++i)
      for (int j = cov.j0; j <= cov.j1; ++j) {
        if (ap[i * ow + j] == self) acc += dyp[i * ow + j];
      }
    dx[e] = acc;
  }
}

template <typename I>
__global__ void avg_pool_kernel(const float* __restrict__ x, float* __restrict__ y, PoolGeometry g, float inv,
                                I total) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  const I oh = static_cast<I>(g.oh), ow = static_cast<I>(g.ow), hw = static_cast<I>(g.h * g.w);
  const int w = static_cast<int>(g.w);
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const Split<I> s = split<I>(e, oh, ow);
    const float* xp = x + s.p * hw;
    const Window win = window_of(g, s.r, s.c);
    float acc = 0.f;
    for (int r = win.h0; r < win.h1; ++r)
      for (int c = win.w0; c < win.w1; ++c) acc += xp[r * w + c];
    y[e] = __fmul_rn(acc, inv);
  }
}

template <typename I>
__global__ void avg_pool_backward_kernel(const float* __restrict__ dy, float* __restrict__ dx, PoolGeometry g,
                                         float inv, I total) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  const I h = static_cast<I>(g.h), w = static_cast<I>(g.w), ohw = static_cast<I>(g.oh * g.ow);
  const int ow = static_cast<int>(g.ow);
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const Split<I> s = split<I>(e, h, w);
    const float* dyp = dy + s.p * ohw;
    const Covering cov = covering_of(g, s.r, s.c);
    float acc = 0.f;
    // Explicit roundings keep nvcc from fusing into an FMA: the CPU rounds dy * inv first.
    for (int i = cov.i0; i <= cov.i1; ++i)
      for (int j = cov.j0; j <= cov.j1; ++j) acc = __fadd_rn(acc, __fmul_rn(dyp[i * ow + j], inv));
    dx[e] = acc;
  }
}

// One warp per plane: lanes stride the plane, the warp adds its lanes' double sums.
__global__ void global_avg_pool_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t planes,
                                       int64_t hw, double inv) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t p = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; p < planes;
       p += warps) {
    const float* xp = x + p * hw;
    double acc = 0.0;
    for (int64_t i = lane; i < hw; i += 32) acc += xp[i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0) y[p] = static_cast<float>(acc * inv);
  }
}

bool fits_u32(int64_t total) { return total < (int64_t{1} << 31); }

// run: launches kernel<uint32_t> or kernel<int64_t> over `total` elements; `limit` is the
// largest flat index any tensor of the problem takes.
#define MTC_POOL_LAUNCH(kernel, total, limit, ...)                                                       \
  do {                                                                                                   \
    if ((total) <= 0) break;                                                                             \
    if (fits_u32(limit)) {                                                                               \
      kernel<uint32_t>                                                                                   \
          <<<blocks(total, kThreads), kThreads, 0, stream>>>(__VA_ARGS__, static_cast<uint32_t>(total)); \
    } else {                                                                                             \
      kernel<int64_t>                                                                                    \
          <<<blocks(total, kThreads), kThreads, 0, stream>>>(__VA_ARGS__, static_cast<int64_t>(total));  \
    }                                                                                                    \
  } while (0)

int64_t in_total(const PoolGeometry& g) { return g.planes * g.h * g.w; }
int64_t out_total(const PoolGeometry& g) { return g.planes * g.oh * g.ow; }
int64_t both(const PoolGeometry& g) { return in_total(g) > out_total(g) ? in_total(g) : out_total(g); }

}  // namespace

void launch_max_pool2d(const float* x, float* y, const PoolGeometry& g, cudaStream_t stream) {
  MTC_POOL_LAUNCH(max_pool_kernel, out_total(g), both(g), x, y, g);
}

void launch_max_pool2d_argmax(const float* x, int32_t* argmax, const PoolGeometry& g, cudaStream_t stream) {
  MTC_POOL_LAUNCH(max_pool_argmax_kernel, out_total(g), both(g), x, argmax, g);
}

void launch_max_pool2d_backward(const int32_t* argmax, const float* dy, float* dx, const PoolGeometry& g,
                                cudaStream_t stream) {
  MTC_POOL_LAUNCH(max_pool_backward_kernel, in_total(g), both(g), argmax, dy, dx, g);
}

void launch_avg_pool2d(const float* x, float* y, const PoolGeometry& g, float inv, cudaStream_t stream) {
  MTC_POOL_LAUNCH(avg_pool_kernel, out_total(g), both(g), x, y, g, inv);
}

void launch_avg_pool2d_backward(const float* dy, float* dx, const PoolGeometry& g, float inv,
                                cudaStream_t stream) {
  MTC_POOL_LAUNCH(avg_pool_backward_kernel, in_total(g), both(g), dy, dx, g, inv);
}

void launch_global_avg_pool(const float* x, float* y, int64_t planes, int64_t hw, double inv,
                            cudaStream_t stream) {
  if (planes <= 0) return;
  global_avg_pool_kernel<<<blocks(planes * 32, kThreads), kThreads, 0, stream>>>(x, y, planes, hw, inv);
}

}  // namespace mtc::cuda
