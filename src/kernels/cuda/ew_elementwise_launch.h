// Launchers of the elementwise CUDA kernels (ew_elementwise.cu): fill, the broadcasting
// binary ops, scale, the activations and their gradients, a strided gather of 4-byte
// elements (expand, permute), and max_grad_mask. Plain C++ on raw device pointers, so the
// host code calling them needs no CUDA compiler; each enqueues on `stream` and returns at
// once (the caller checks the launch with cuda::last_launch).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

inline constexpr int kMaxStridedDims = 8;

// Strided: an output of `nd` row-major dims read from up to two inputs through element
// strides (0 along broadcast dims), stored innermost dim FIRST (index 0 is the fastest
// varying), so that the kernels' unrolled walk indexes the arrays with constants. Passed
// to the kernels by value (about 200 bytes).
struct Strided {
  int nd = 0;
  int64_t size[kMaxStridedDims] = {};
  int64_t stride_a[kMaxStridedDims] = {};
  int64_t stride_b[kMaxStridedDims] = {};
};

// make_strided: s from the output's sizes and the inputs' strides (sb may be null), with
// size-1 dims dropped and neighbouring dims merged where both inputs walk them as one
// (so a broadcast over a 6-d tensor usually becomes 2 or 3 dims). False when more than
// kMaxStridedDims dims remain.
inline bool make_strided(int nd, const int64_t* size, const int64_t* sa, const int64_t* sb, Strided* s) {
  *s = Strided{};
  for (int d = 0; d < nd; ++d) {
    if (size[d] == 1) continue;
    const int64_t a = sa[d], b = sb != nullptr ? sb[d] : 0;
    const int p = s->nd - 1;
    if (p >= 0 && s->stride_a[p] == a * size[d] && s->stride_b[p] == b * size[d]) {
      s->size[p] *= size[d];
      s->stride_a[p] = a;
      s->stride_b[p] = b;
      continue;
    }
    if (s->nd == kMaxStridedDims) return false;
    s->size[s->nd] = size[d];
    s->stride_a[s->nd] = a;
    s->stride_b[s->nd] = b;
    ++s->nd;
  }
  for (int i = 0, j = s->nd - 1; i < j; ++i, --j) {  // innermost first
    const int64_t z = s->size[i], a = s->stride_a[i], b = s->stride_b[i];
    s->size[i] = s->size[j];
    s->stride_a[i] = s->stride_a[j];
    s->stride_b[i] = s->stride_b[j];
    s->size[j] = z;
    s->stride_a[j] = a;
    s->stride_b[j] = b;
  }
  return true;
}

enum class EwBinary : int { kAdd = 0, kSub = 1, kMul = 2 };
enum class EwAct : int { kRelu = 0, kSwish = 1, kGelu = 2, kSigmoid = 3, kTanh = 4 };

// launch_fill32: n 4-byte elements set to `bits` (a float's or an int32's bit pattern).
void launch_fill32(void* y, uint32_t bits, int64_t n, cudaStream_t stream);

// Binary ops, three layouts: a, b and y of one shape; b a single element; anything else
// through s (a: stride_a, b: stride_b) over y's n elements.
void launch_binary_same(EwBinary k, const float* a, const float* b, float* y, int64_t n, cudaStream_t stream);
void launch_binary_scalar_b(EwBinary k, const float* a, const float* b, float* y, int64_t n,
                            cudaStream_t stream);
void launch_binary_strided(EwBinary k, const float* a, const float* b, float* y, int64_t n, const Strided& s,
                           cudaStream_t stream);

// launch_scale: y = x * s.
void launch_scale(const float* x, float* y, float s, int64_t n, cudaStream_t stream);

// launch_act: y = act(x). launch_act_grad: dx from `saved` (relu: y; swish, gelu: x) and dy.
void launch_act(EwAct k, const float* x, float* y, int64_t n, cudaStream_t stream);
void launch_act_grad(EwAct k, const float* saved, const float* dy, float* dx, int64_t n, cudaStream_t stream);

// launch_gather32: y[i] = x[offset of i through s.stride_a] for y's n 4-byte elements.
void launch_gather32(const void* x, void* y, int64_t n, const Strided& s, cudaStream_t stream);

// launch_max_grad_mask: out = x == y ? g : 0.
void launch_max_grad_mask(const float* x, const float* y, const float* g, float* out, int64_t n,
                          cudaStream_t stream);

}  // namespace mtc::cuda
