// Per-channel sums over x viewed as (N, C, S), shared by batch norm's CPU kernels
// (batch_norm.cc) and synchronised batch norm's (sync_batch_norm.cc). Each channel's sums
// run in an order fixed by the data's shape alone, so results do not depend on the
// thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "mtc/tensor.h"

namespace mtc::cpu {

// NCS: the layout (N, C, S) of x, from its shape; S the product of the trailing dims.
struct NCS {
  int64_t n, c, s;
  explicit NCS(const Shape& x) : n(x[0]), c(x[1]), s(numel(x) / std::max<int64_t>(x[0] * x[1], 1)) {}
  int64_t count() const { return n * s; }  // values per channel
  int64_t plane(int64_t i, int64_t ch) const { return (i * c + ch) * s; }  // the offset of (i, ch, 0)
};

// v8f: eight floats in one vector register (GCC/Clang vector extension; AVX with
// -march=x86-64-v3, two SSE registers otherwise). GCC does not keep plain lane arrays in
// registers here (measured 9x slower), so the sums use vectors explicitly.
using v8f = float __attribute__((vector_size(32)));
using v4f = float __attribute__((vector_size(16)));
using v4d = double __attribute__((vector_size(32)));
inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline v4d load4d(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, v4d);
}
inline constexpr int64_t kFlushEvery = 2048;  // values summed in float lanes before they go to double

// PairSums: two running sums over one channel's values. Values go round-robin into 16
// float lanes (two v8f); every kFlushEvery values (at a plane's end) the lanes are added
// to double totals. Float error stays that of ~kFlushEvery / 16 terms; the order is fixed
// by the data's shape alone.
struct PairSums {
  v8f a0 = {}, a1 = {}, b0 = {}, b1 = {};
  double total_a = 0, total_b = 0;
  int64_t pending = 0;
  void end_plane(int64_t len) {
    pending += len;
    if (pending >= kFlushEvery) flush();
  }
  void flush() {
    for (int j = 0; j < 8; ++j) {
      total_a += static_cast<double>(a0[j]) + static_cast<double>(a1[j]);
      total_b += static_cast<double>(b0[j]) + static_cast<double>(b1[j]);
    }
    a0 = a1 = b0 = b1 = v8f{};
    pending = 0;
  }
};

// add_moments: sums of (x - k) and (x - k)^2 over one plane. Shifting by k, a value of
// the channel, keeps the one-pass variance free of cancellation.
inline void add_moments(const float* x, int64_t len, float k, PairSums& s) {
  v8f a0 = s.a0, a1 = s.a1, b0 = s.b0, b1 = s.b1;  // locals stay in registers
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const v8f d0 = load8(x + i) - k, d1 = load8(x + i + 8) - k;
    a0 += d0;
    a1 += d1;
    b0 += d0 * d0;
    b1 += d1 * d1;
  }
  for (; i < len; ++i) {
    const float d = x[i] - k;
    a0[0] += d;
    b0[0] += d * d;
  }
  s.a0 = a0, s.a1 = a1, s.b0 = b0, s.b1 = b1;
  s.end_plane(len);
}

// add_grad_sums: sums of dy and dy * (x - mean) over one plane.
inline void add_grad_sums(const float* x, const float* dy, int64_t len, float mean, PairSums& s) {
  v8f a0 = s.a0, a1 = s.a1, b0 = s.b0, b1 = s.b1;
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const v8f g0 = load8(dy + i), g1 = load8(dy + i + 8);
    a0 += g0;
    a1 += g1;
    b0 += g0 * (load8(x + i) - mean);
    b1 += g1 * (load8(x + i + 8) - mean);
  }
  for (; i < len; ++i) {
    a0[0] += dy[i];
    b0[0] += dy[i] * (x[i] - mean);
  }
  s.a0 = a0, s.a1 = a1, s.b0 = b0, s.b1 = b1;
  s.end_plane(len);
}

// RawMoments: sum x and sum x^2 over one channel's values, unshifted (synchronised batch
// norm adds them over ranks, which share no shift), in double lanes throughout: values go
// round-robin into 8 double lanes (two v4d) per sum, and the lanes are added in order at
// the end. (Sixteen lanes per sum measured no faster: the pass waits on memory.)
struct RawMoments {
  v4d s0 = {}, s1 = {}, q0 = {}, q1 = {};
  double tail_s = 0, tail_q = 0;
  void add(const float* x, int64_t len) {
    v4d a0 = s0, a1 = s1, b0 = q0, b1 = q1;
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
      const v4d v0 = load4d(x + i), v1 = load4d(x + i + 4);
      a0 += v0;
      a1 += v1;
      b0 += v0 * v0;
      b1 += v1 * v1;
    }
    for (; i < len; ++i) {
      const double v = x[i];
      tail_s += v;
      tail_q += v * v;
    }
    s0 = a0, s1 = a1, q0 = b0, q1 = b1;
  }
  double sum() const { return lanes(s0, s1) + tail_s; }
  double sumsq() const { return lanes(q0, q1) + tail_q; }
  static double lanes(v4d a, v4d b) {
    double t = 0;
    for (int j = 0; j < 4; ++j) t += a[j] + b[j];
    return t;
  }
};

}  // namespace mtc::cpu
