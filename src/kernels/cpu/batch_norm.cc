// CPU kernels of batch_norm and its backward. x is viewed as (N, C, S), S the product of
// the trailing dims. Threads split the channels; each channel's sums run in a fixed order
// (float lanes flushed into double, see PairSums in bn_sums.h), so results do not depend
// on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/bn_sums.h"
#include "kernels/cpu/cpu_util.h"
#include "ops/batch_norm.h"

namespace mtc::cpu {
namespace {

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
