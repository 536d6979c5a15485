// The elementwise CUDA kernels behind ew_elementwise_launch.h: fill, add/sub/mul (same
// shape, scalar operand, or broadcast through strides), scale, relu/swish/gelu and their
// gradients, a strided gather of 4-byte elements (expand, permute) and max_grad_mask.
// Each thread handles elements in a grid-stride loop; the arithmetic is the CPU kernels'
// (src/kernels/cpu/elementwise.cc), in float, with expf/erff standing in for std::exp /
// std::erf (a few ulps apart).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ew_elementwise_launch.h"
#include "kernels/cuda/launch.h"

namespace mtc::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// Index arithmetic in 32 bits when every index fits (integer division is several times
// cheaper), else in 64.
inline bool fits32(int64_t n) { return n < (int64_t{1} << 31); }

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <int K>
__device__ __forceinline__ float binary_op(float a, float b) {
  if (K == 0) return a + b;
  if (K == 1) return a - b;
  return a * b;
}

// strided_offsets: the offsets in a and b of output element i (row-major over the
// sizes; s holds the innermost dim first, and the unrolled loop indexes it with constants
// so the fields stay in the kernel's parameter space).
template <typename I>
__device__ __forceinline__ void strided_offsets(const Strided& s, I i, int64_t& oa, int64_t& ob) {
  oa = 0;
  ob = 0;
#pragma unroll
  for (int d = 0; d < kMaxStridedDims; ++d) {
    if (d >= s.nd) break;
    const I size = static_cast<I>(s.size[d]);
    const I q = i / size;
    const I r = i - q * size;
    oa += static_cast<int64_t>(r) * s.stride_a[d];
    ob += static_cast<int64_t>(r) * s.stride_b[d];
    i = q;
  }
}

__global__ void fill32_kernel(uint32_t* y, uint32_t bits, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = bits;
}

template <int K>
__global__ void binary_same_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                   float* __restrict__ y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = binary_op<K>(a[i], b[i]);
}

template <int K>
__global__ void binary_scalar_b_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                       float* __restrict__ y, int64_t n) {
  const float s = *b;
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = binary_op<K>(a[i], s);
}

template <int K, typename I>
__global__ void binary_strided_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ y, int64_t n, Strided s) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t oa, ob;
    strided_offsets<I>(s, static_cast<I>(i), oa, ob);
    y[i] = binary_op<K>(a[oa], b[ob]);
  }
}

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float s, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = x[i] * s;
}

template <int K>
__global__ void act_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    if (K == 0) {
      y[i] = v > 0.f ? v : 0.f;
    } else if (K == 1) {
      y[i] = v / (1.f + expf(-v));
    } else if (K == 2) {
      y[i] = 0.5f * v * (1.f + erff(v * kInvSqrt2));
    } else if (K == 3) {
      y[i] = 1.f / (1.f + expf(-v));
    } else {
      y[i] = tanhf(v);
    }
  }
}

template <int K>
__global__ void act_grad_kernel(const float* __restrict__ saved, const float* __restrict__ dy,
                                float* __restrict__ dx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float s = saved[i];
    if (K == 0) {
      dx[i] = s > 0.f ? dy[i] : 0.f;
    } else if (K == 1) {
      const float sg = 1.f / (1.f + expf(-s));
      dx[i] = dy[i] * (sg + s * sg * (1.f - sg));
    } else if (K == 2) {
      const float cdf = 0.5f * (1.f + erff(s * kInvSqrt2));
      dx[i] = dy[i] * (cdf + s * kInvSqrt2Pi * expf(-0.5f * s * s));
    } else if (K == 3) {
      dx[i] = dy[i] * s * (1.f - s);  // s: sigmoid's output
    } else {
      dx[i] = dy[i] * (1.f - s * s);  // s: tanh's output
    }
  }
}

template <typename I>
__global__ void gather32_kernel(const uint32_t* __restrict__ x, uint32_t* __restrict__ y, int64_t n,
                                Strided s) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t ox, unused;
    strided_offsets<I>(s, static_cast<I>(i), ox, unused);
    y[i] = x[ox];
  }
}

__global__ void max_grad_mask_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                     const float* __restrict__ g, float* __restrict__ out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = x[i] == y[i] ? g[i] : 0.f;
}

}  // namespace

void launch_fill32(void* y, uint32_t bits, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fill32_kernel<<<blocks(n, kThreads), kThreads, 0, stream>>>(static_cast<uint32_t*>(y), bits, n);
}

void launch_binary_same(EwBinary k, const float* a, const float* b, float* y, int64_t n,
                        cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned g = blocks(n, kThreads);
  switch (k) {
    case EwBinary::kAdd: binary_same_kernel<0><<<g, kThreads, 0, stream>>>(a, b, y, n); break;
    case EwBinary::kSub: binary_same_kernel<1><<<g, kThreads, 0, stream>>>(a, b, y, n); break;
    case EwBinary::kMul: binary_same_kernel<2><<<g, kThreads, 0, stream>>>(a, b, y, n); break;
  }
}

void launch_binary_scalar_b(EwBinary k, const float* a, const float* b, float* y, int64_t n,
                            cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned g = blocks(n, kThreads);
  switch (k) {
    case EwBinary::kAdd: binary_scalar_b_kernel<0><<<g, kThreads, 0, stream>>>(a, b, y, n); break;
    case EwBinary::kSub: binary_scalar_b_kernel<1><<<g, kThreads, 0, stream>>>(a, b, y, n); break;
    case EwBinary::kMul: binary_scalar_b_kernel<2><<<g, kThreads, 0, stream>>>(a, b, y, n); break;
  }
}

template <int K>
static void binary_strided_as(const float* a, const float* b, float* y, int64_t n, const Strided& s,
                              cudaStream_t stream) {
  const unsigned g = blocks(n, kThreads);
  if (fits32(n)) {
    binary_strided_kernel<K, uint32_t><<<g, kThreads, 0, stream>>>(a, b, y, n, s);
  } else {
    binary_strided_kernel<K, uint64_t><<<g, kThreads, 0, stream>>>(a, b, y, n, s);
  }
}

void launch_binary_strided(EwBinary k, const float* a, const float* b, float* y, int64_t n, const Strided& s,
                           cudaStream_t stream) {
  if (n <= 0) return;
  switch (k) {
    case EwBinary::kAdd: binary_strided_as<0>(a, b, y, n, s, stream); break;
    case EwBinary::kSub: binary_strided_as<1>(a, b, y, n, s, stream); break;
    case EwBinary::kMul: binary_strided_as<2>(a, b, y, n, s, stream); break;
  }
}

void launch_scale(const float* x, float* y, float s, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  scale_kernel<<<blocks(n, kThreads), kThreads, 0, stream>>>(x, y, s, n);
}

void launch_act(EwAct k, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned g = blocks(n, kThreads);
  switch (k) {
    case EwAct::kRelu: act_kernel<0><<<g, kThreads, 0, stream>>>(x, y, n); break;
    case EwAct::kSwish: act_kernel<1><<<g, kThreads, 0, stream>>>(x, y, n); break;
    case EwAct::kGelu: act_kernel<2><<<g, kThreads, 0, stream>>>(x, y, n); break;
    case EwAct::kSigmoid: act_kernel<3><<<g, kThreads, 0, stream>>>(x, y, n); break;
    case EwAct::kTanh: act_kernel<4><<<g, kThreads, 0, stream>>>(x, y, n); break;
  }
}

void launch_act_grad(EwAct k, const float* saved, const float* dy, float* dx, int64_t n,
                     cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned g = blocks(n, kThreads);
  switch (k) {
    case EwAct::kRelu: act_grad_kernel<0><<<g, kThreads, 0, stream>>>(saved, dy, dx, n); break;
    case EwAct::kSwish: act_grad_kernel<1><<<g, kThreads, 0, stream>>>(saved, dy, dx, n); break;
    case EwAct::kGelu: act_grad_kernel<2><<<g, kThreads, 0, stream>>>(saved, dy, dx, n); break;
    case EwAct::kSigmoid: act_grad_kernel<3><<<g, kThreads, 0, stream>>>(saved, dy, dx, n); break;
    case EwAct::kTanh: act_grad_kernel<4><<<g, kThreads, 0, stream>>>(saved, dy, dx, n); break;
  }
}

void launch_gather32(const void* x, void* y, int64_t n, const Strided& s, cudaStream_t stream) {
  if (n <= 0) return;
  const auto* px = static_cast<const uint32_t*>(x);
  auto* py = static_cast<uint32_t*>(y);
  const unsigned g = blocks(n, kThreads);
  if (fits32(n)) {
    gather32_kernel<uint32_t><<<g, kThreads, 0, stream>>>(px, py, n, s);
  } else {
    gather32_kernel<uint64_t><<<g, kThreads, 0, stream>>>(px, py, n, s);
  }
}

void launch_max_grad_mask(const float* x, const float* y, const float* g, float* out, int64_t n,
                          cudaStream_t stream) {
  if (n <= 0) return;
  max_grad_mask_kernel<<<blocks(n, kThreads), kThreads, 0, stream>>>(x, y, g, out, n);
}

}  // namespace mtc::cuda
