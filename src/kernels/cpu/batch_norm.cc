// CPU kernels of batch_norm and its backward. x is viewed as (N, C, S), S the product of
// the trailing dims. Threads split the channels; each channel's sums run in a fixed order
// (float lanes flushed into double, see PairSums), so results do not depend on the
// thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "ops/batch_norm.h"

namespace mtc::cpu {
namespace {

// v8f: eight floats in one vector register (GCC/Clang vector extension; AVX with
// -march=x86-64-v3, two SSE registers otherwise). GCC does not keep plain lane arrays in
// registers here (measured 9x slower), so the sums use vectors explicitly.
using v8f = float __attribute__((vector_size(32)));
inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
constexpr int64_t kFlushEvery = 2048;  // values summed in float lanes before they go to double

// Layout: (N, C, S) of x, from its shape.
struct NCS {
  int64_t n, c, s;
  explicit NCS(const Shape& x) : n(x[0]), c(x[1]), s(numel(x) / std::max<int64_t>(x[0] * x[1], 1)) {}
  int64_t count() const { return n * s; }  // values per channel
};

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

// normalize: y = (x - mean) * scale + beta over one channel's planes. Subtracting the
// mean first keeps a large mean from cancelling against the shift.
inline void normalize(const float* x, float* y, const NCS& l, int64_t ch, float mean, float scale, float beta) {
  for (int64_t i = 0; i < l.n; ++i) {
    const int64_t off = (i * l.c + ch) * l.s;
#pragma omp simd
    for (int64_t j = 0; j < l.s; ++j) y[off + j] = (x[off + j] - mean) * scale + beta;
  }
}

absl::Status batch_norm(const BatchNormOp& op, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  const float* gamma = a.in[1].f32();
  const float* beta = a.in[2].f32();
  float* rmean = op.tracks_running ? a.in[3].f32() : nullptr;  // updated in place in training
  float* rvar = op.tracks_running ? a.in[4].f32() : nullptr;
  float* y = a.out[0].f32();
  float* mean_out = a.out[1].f32();
  float* invstd_out = a.out[2].f32();
  const NCS l(a.in[0].shape());
  const int64_t m = l.count();
  const bool parallel = a.in[0].numel() > kParallelGrain;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t ch = 0; ch < l.c; ++ch) {
    float mean, invstd;
    if (op.training) {
      const float k = m > 0 ? x[ch * l.s] : 0.f;
      PairSums s;
      for (int64_t i = 0; i < l.n; ++i) add_moments(x + (i * l.c + ch) * l.s, l.s, k, s);
      s.flush();
      const double d_mean = s.total_a / static_cast<double>(m);
      const double var = std::max(s.total_b / static_cast<double>(m) - d_mean * d_mean, 0.0);
      mean = static_cast<float>(k + d_mean);
      invstd = static_cast<float>(1.0 / std::sqrt(var + op.eps));
      if (op.tracks_running && !a.ctx.recomputing()) {  // a recompute must not update twice
        const double unbiased = var * static_cast<double>(m) / static_cast<double>(m - 1);
        const double mo = op.momentum;
        rmean[ch] = static_cast<float>((1.0 - mo) * rmean[ch] + mo * (k + d_mean));
        rvar[ch] = static_cast<float>((1.0 - mo) * rvar[ch] + mo * unbiased);
      }
    } else {
      mean = rmean[ch];
      invstd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(rvar[ch]) + op.eps));
    }
    mean_out[ch] = mean;
    invstd_out[ch] = invstd;
    normalize(x, y, l, ch, mean, gamma[ch] * invstd, beta[ch]);
  }
  return absl::OkStatus();
}

absl::Status batch_norm_backward(const BatchNormBackwardOp& op, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  const float* gamma = a.in[1].f32();
  const float* mean = a.in[2].f32();
  const float* invstd = a.in[3].f32();
  const float* dy = a.in[4].f32();
  float* dx = a.out[0].f32();
  float* dgamma = a.out[1].f32();
  float* dbeta = a.out[2].f32();
  const NCS l(a.in[0].shape());
  const double m = static_cast<double>(l.count());
  const bool parallel = a.in[0].numel() > kParallelGrain;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t ch = 0; ch < l.c; ++ch) {
    PairSums s;
    for (int64_t i = 0; i < l.n; ++i) {
      const int64_t off = (i * l.c + ch) * l.s;
      add_grad_sums(x + off, dy + off, l.s, mean[ch], s);
    }
    s.flush();
    const double sum_dy = s.total_a, sum_dy_xc = s.total_b;
    const double is = invstd[ch];
    dbeta[ch] = static_cast<float>(sum_dy);
    dgamma[ch] = static_cast<float>(sum_dy_xc * is);
    // dx = dy * p + (x - mean) * q + r. Training: dx = gamma * invstd * (dy - mean(dy) -
    // xhat * mean(dy * xhat)); eval: dx = gamma * invstd * dy.
    const double p = gamma[ch] * is;
    double q = 0, r = 0;
    if (op.training && m > 0) {
      q = -p * is * is * sum_dy_xc / m;
      r = -p * sum_dy / m;
    }
    const float pf = static_cast<float>(p), qf = static_cast<float>(q), rf = static_cast<float>(r), mf = mean[ch];
    for (int64_t i = 0; i < l.n; ++i) {
      const int64_t off = (i * l.c + ch) * l.s;
#pragma omp simd
      for (int64_t j = 0; j < l.s; ++j) dx[off + j] = dy[off + j] * pf + (x[off + j] - mf) * qf + rf;
    }
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(BatchNormOp, DeviceType::kCPU, batch_norm);
MTC_REGISTER_KERNEL(BatchNormBackwardOp, DeviceType::kCPU, batch_norm_backward);

}  // namespace mtc::cpu
