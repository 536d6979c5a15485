// CPU kernels of batch_norm and its backward. x is viewed as (N, C, S), S the product of
// the trailing dims. Threads split the channels; each channel's sums run in double over
// 8 interleaved lanes in a fixed order, so results do not depend on the thread count.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_util.h"
#include "ops/batch_norm.h"

namespace mtc::cpu {
namespace {

constexpr int kLanes = 8;  // independent accumulators: lets the compiler vectorise the sums

// Layout: (N, C, S) of x, from its shape.
struct NCS {
  int64_t n, c, s;
  explicit NCS(const Shape& x) : n(x[0]), c(x[1]), s(numel(x) / std::max<int64_t>(x[0] * x[1], 1)) {}
  int64_t count() const { return n * s; }  // values per channel
};

// Lanes: kLanes partial sums combined in a fixed tree.
struct Lanes {
  double v[kLanes] = {};
  double total() const {
    double t[kLanes / 2];
    for (int j = 0; j < kLanes / 2; ++j) t[j] = v[j] + v[j + kLanes / 2];
    return (t[0] + t[2]) + (t[1] + t[3]);
  }
};

// moments: adds sum(x - k) and sum((x - k)^2) over x[0, len) into s1, s2. Shifting by k,
// a value of the channel, keeps the one-pass variance free of cancellation.
inline void moments(const float* x, int64_t len, float k, Lanes& s1, Lanes& s2) {
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double d = static_cast<double>(x[i + j]) - k;
      s1.v[j] += d;
      s2.v[j] += d * d;
    }
  }
  for (; i < len; ++i) {
    const double d = static_cast<double>(x[i]) - k;
    s1.v[0] += d;
    s2.v[0] += d * d;
  }
}

// grad_sums: adds sum(dy) and sum(dy * (x - mean)) over [0, len) into s1, s2.
inline void grad_sums(const float* x, const float* dy, int64_t len, float mean, Lanes& s1, Lanes& s2) {
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double g = dy[i + j];
      s1.v[j] += g;
      s2.v[j] += g * (static_cast<double>(x[i + j]) - mean);
    }
  }
  for (; i < len; ++i) {
    s1.v[0] += dy[i];
    s2.v[0] += static_cast<double>(dy[i]) * (static_cast<double>(x[i]) - mean);
  }
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
      Lanes s1, s2;
      for (int64_t i = 0; i < l.n; ++i) moments(x + (i * l.c + ch) * l.s, l.s, k, s1, s2);
      const double d_mean = s1.total() / static_cast<double>(m);
      const double var = std::max(s2.total() / static_cast<double>(m) - d_mean * d_mean, 0.0);
      mean = static_cast<float>(k + d_mean);
      invstd = static_cast<float>(1.0 / std::sqrt(var + op.eps));
      if (op.tracks_running) {
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
    Lanes s1, s2;
    for (int64_t i = 0; i < l.n; ++i) {
      const int64_t off = (i * l.c + ch) * l.s;
      grad_sums(x + off, dy + off, l.s, mean[ch], s1, s2);
    }
    const double sum_dy = s1.total(), sum_dy_xc = s2.total();
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
