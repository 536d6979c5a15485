// CPU kernels of synchronised batch norm's ops (src/dist/sync_batch_norm.h). x is viewed
// as (N, C, S); threads split the channels, and each channel's sums run in double in a
// fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "dist/sync_batch_norm.h"
#include "kernels/cpu/cpu_util.h"

namespace mtc::cpu {
namespace {

struct Layout {
  int64_t n, c, s;
  explicit Layout(const Shape& x) : n(x[0]), c(x[1]), s(numel(x) / std::max<int64_t>(x[0] * x[1], 1)) {}
  // plane: the offset of (i, ch, 0).
  int64_t plane(int64_t i, int64_t ch) const { return (i * c + ch) * s; }
};

// split: v as two floats whose sum is v to about double precision.
void split(double v, float* hi, float* lo) {
  *hi = static_cast<float>(v);
  *lo = static_cast<float>(v - static_cast<double>(*hi));
}
double joined(const float* stats, int64_t c, int row_hi, int64_t ch) {
  return static_cast<double>(stats[row_hi * c + ch]) + static_cast<double>(stats[(row_hi + 1) * c + ch]);
}

absl::Status bn_stats(const dist::BnStatsOp&, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  float* st = a.out[0].f32();
  const Layout l(a.in[0].shape());
#pragma omp parallel for if (a.in[0].numel() > kParallelGrain)
  for (int64_t ch = 0; ch < l.c; ++ch) {
    double sum = 0, sumsq = 0;
    for (int64_t i = 0; i < l.n; ++i) {
      const float* p = x + l.plane(i, ch);
      for (int64_t j = 0; j < l.s; ++j) {
        const double v = p[j];
        sum += v;
        sumsq += v * v;
      }
    }
    split(sum, &st[0 * l.c + ch], &st[1 * l.c + ch]);
    split(sumsq, &st[2 * l.c + ch], &st[3 * l.c + ch]);
    st[4 * l.c + ch] = static_cast<float>(l.n * l.s);
  }
  return absl::OkStatus();
}

absl::Status bn_stats_backward(const dist::BnStatsBackwardOp&, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  const float* d = a.in[1].f32();
  float* dx = a.out[0].f32();
  const Layout l(a.in[0].shape());
#pragma omp parallel for if (a.in[0].numel() > kParallelGrain)
  for (int64_t ch = 0; ch < l.c; ++ch) {
    const float d_sum = d[0 * l.c + ch], d_sumsq2 = 2.f * d[2 * l.c + ch];
    for (int64_t i = 0; i < l.n; ++i) {
      const int64_t o = l.plane(i, ch);
      for (int64_t j = 0; j < l.s; ++j) dx[o + j] = d_sum + d_sumsq2 * x[o + j];
    }
  }
  return absl::OkStatus();
}

absl::Status sync_batch_norm(const dist::SyncBatchNormOp& op, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  const float* gamma = a.in[1].f32();
  const float* beta = a.in[2].f32();
  const float* st = a.in[3].f32();
  float* y = a.out[0].f32();
  float* mean_out = a.out[1].f32();
  float* invstd_out = a.out[2].f32();
  const Layout l(a.in[0].shape());
  const bool update = op.tracks_running && !a.ctx.recomputing();
  for (int64_t ch = 0; ch < l.c; ++ch) {
    const double n = st[4 * l.c + ch];
    if (!(n > 1)) {
      return absl::InvalidArgumentError(absl::StrCat("channel ", ch, " has ", n,
                                                     " values over all ranks, expected more than 1"));
    }
  }
#pragma omp parallel for if (a.in[0].numel() > kParallelGrain)
  for (int64_t ch = 0; ch < l.c; ++ch) {
    const double n = st[4 * l.c + ch];
    const double mean = joined(st, l.c, 0, ch) / n;
    const double var = std::max(joined(st, l.c, 2, ch) / n - mean * mean, 0.0);
    const double invstd = 1.0 / std::sqrt(var + op.eps);
    mean_out[ch] = static_cast<float>(mean);
    invstd_out[ch] = static_cast<float>(invstd);
    const float k = static_cast<float>(invstd) * gamma[ch];
    const float b = beta[ch] - static_cast<float>(mean) * k;
    for (int64_t i = 0; i < l.n; ++i) {
      const int64_t o = l.plane(i, ch);
      for (int64_t j = 0; j < l.s; ++j) y[o + j] = x[o + j] * k + b;
    }
    if (update) {
      float* rm = a.in[4].f32();
      float* rv = a.in[5].f32();
      rm[ch] = static_cast<float>((1.0 - op.momentum) * rm[ch] + op.momentum * mean);
      rv[ch] = static_cast<float>((1.0 - op.momentum) * rv[ch] + op.momentum * var * n / (n - 1));
    }
  }
  return absl::OkStatus();
}

// The gradient of y = (x - mean) * invstd * gamma + beta, with mean = S1 / n and
// var = S2 / n - mean^2 taken from the global sums: dx through y alone, dgamma, dbeta,
// and dS1, dS2 (the all_reduce's backward sums them over ranks, bn_stats's turns them
// into the rest of dx).
absl::Status sync_batch_norm_backward(const dist::SyncBatchNormBackwardOp&, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  const float* gamma = a.in[1].f32();
  const float* st = a.in[2].f32();
  const float* mean = a.in[3].f32();
  const float* invstd = a.in[4].f32();
  const float* dy = a.in[5].f32();
  float* dx = a.out[0].f32();
  float* dgamma = a.out[1].f32();
  float* dbeta = a.out[2].f32();
  float* dst = a.out[3].f32();
  const Layout l(a.in[0].shape());
#pragma omp parallel for if (a.in[0].numel() > kParallelGrain)
  for (int64_t ch = 0; ch < l.c; ++ch) {
    const double n = st[4 * l.c + ch];
    const double m = mean[ch], is = invstd[ch], g = gamma[ch];
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t i = 0; i < l.n; ++i) {
      const int64_t o = l.plane(i, ch);
      for (int64_t j = 0; j < l.s; ++j) {
        sum_dy += dy[o + j];
        sum_dy_xhat += dy[o + j] * ((x[o + j] - m) * is);
      }
    }
    dgamma[ch] = static_cast<float>(sum_dy_xhat);
    dbeta[ch] = static_cast<float>(sum_dy);
    const float k = static_cast<float>(g * is);
    for (int64_t i = 0; i < l.n; ++i) {
      const int64_t o = l.plane(i, ch);
      for (int64_t j = 0; j < l.s; ++j) dx[o + j] = dy[o + j] * k;
    }
    const double d_mean = -g * is * sum_dy;
    const double d_var = -0.5 * g * sum_dy_xhat * is * is;
    dst[0 * l.c + ch] = static_cast<float>(d_mean / n - 2.0 * m * d_var / n);
    dst[1 * l.c + ch] = 0.f;
    dst[2 * l.c + ch] = static_cast<float>(d_var / n);
    dst[3 * l.c + ch] = 0.f;
    dst[4 * l.c + ch] = 0.f;
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(dist::BnStatsOp, DeviceType::kCPU, bn_stats);
MTC_REGISTER_KERNEL(dist::BnStatsBackwardOp, DeviceType::kCPU, bn_stats_backward);
MTC_REGISTER_KERNEL(dist::SyncBatchNormOp, DeviceType::kCPU, sync_batch_norm);
MTC_REGISTER_KERNEL(dist::SyncBatchNormBackwardOp, DeviceType::kCPU, sync_batch_norm_backward);

}  // namespace mtc::cpu
