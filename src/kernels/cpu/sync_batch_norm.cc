// CPU kernels of synchronised batch norm's ops (src/dist/sync_batch_norm.h). x is viewed
// as (N, C, S); threads split the channels, and each channel's sums run in an order fixed
// by the shape (bn_sums.h), so results do not depend on the thread count: the statistics
// in double lanes (RawMoments), the gradient sums as batch_norm_backward's (PairSums).
//
// Each pass walks a thread's channels in memory order, sample by sample (for_planes),
// not channel by channel as batch_norm's fused kernels do. Those read a channel's planes
// a second time while they are in cache; here an all-reduce separates the two passes, so
// each pass reads x from memory, and a walk in address order streams where a walk over
// one channel's planes, C planes apart, does not (docs/data-parallel.md measures both).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <omp.h>

#include "absl/strings/str_cat.h"
#include "dist/sync_batch_norm.h"
#include "kernels/cpu/bn_sums.h"
#include "kernels/cpu/cpu_util.h"

namespace mtc::cpu {
namespace {

using Layout = NCS;

// for_planes: f(i, ch) for every plane of x, sample by sample; threads take a block of
// channels each. A channel's planes come in the order of i on every thread count.
template <typename F>
void for_planes(const Layout& l, bool parallel, F&& f) {
#pragma omp parallel if (parallel)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t c0 = l.c * t / threads, c1 = l.c * (t + 1) / threads;
    for (int64_t i = 0; i < l.n; ++i) {
      for (int64_t ch = c0; ch < c1; ++ch) f(i, ch);
    }
  }
}

// split: v as two floats whose sum is v to about double precision.
void split(double v, float* hi, float* lo) {
  *hi = static_cast<float>(v);
  *lo = static_cast<float>(v - static_cast<double>(*hi));
}
double joined(const float* rows, int64_t c, int row_hi, int64_t ch) {
  return static_cast<double>(rows[row_hi * c + ch]) + static_cast<double>(rows[(row_hi + 1) * c + ch]);
}

absl::Status bn_stats(const dist::BnStatsOp&, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  float* st = a.out[0].f32();
  const Layout l(a.in[0].shape());
  std::vector<RawMoments> m(static_cast<size_t>(l.c));
  for_planes(l, a.in[0].numel() > kParallelGrain, [&](int64_t i, int64_t ch) { m[ch].add(x + l.plane(i, ch), l.s); });
  for (int64_t ch = 0; ch < l.c; ++ch) {
    split(m[ch].sum(), &st[0 * l.c + ch], &st[1 * l.c + ch]);
    split(m[ch].sumsq(), &st[2 * l.c + ch], &st[3 * l.c + ch]);
    st[4 * l.c + ch] = static_cast<float>(l.n * l.s);
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
  std::vector<float> scale(static_cast<size_t>(l.c)), shift(static_cast<size_t>(l.c));
  for (int64_t ch = 0; ch < l.c; ++ch) {
    const double n = st[4 * l.c + ch];
    const double mean = joined(st, l.c, 0, ch) / n;
    const double var = std::max(joined(st, l.c, 2, ch) / n - mean * mean, 0.0);
    const double invstd = 1.0 / std::sqrt(var + op.eps);
    mean_out[ch] = static_cast<float>(mean);
    invstd_out[ch] = static_cast<float>(invstd);
    scale[ch] = static_cast<float>(invstd) * gamma[ch];
    shift[ch] = beta[ch] - static_cast<float>(mean) * scale[ch];
    if (update) {
      float* rm = a.in[4].f32();
      float* rv = a.in[5].f32();
      rm[ch] = static_cast<float>((1.0 - op.momentum) * rm[ch] + op.momentum * mean);
      rv[ch] = static_cast<float>((1.0 - op.momentum) * rv[ch] + op.momentum * var * n / (n - 1));
    }
  }
  for_planes(l, a.in[0].numel() > kParallelGrain, [&](int64_t i, int64_t ch) {
    const int64_t o = l.plane(i, ch);
    const float k = scale[ch], b = shift[ch];
#pragma omp simd
    for (int64_t j = 0; j < l.s; ++j) y[o + j] = x[o + j] * k + b;
  });
  return absl::OkStatus();
}

absl::Status bn_grad_sums(const dist::BnGradSumsOp&, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  const float* mean = a.in[1].f32();
  const float* dy = a.in[2].f32();
  float* sums = a.out[0].f32();
  const Layout l(a.in[0].shape());
  std::vector<PairSums> s(static_cast<size_t>(l.c));
  for_planes(l, a.in[0].numel() > kParallelGrain, [&](int64_t i, int64_t ch) {
    add_grad_sums(x + l.plane(i, ch), dy + l.plane(i, ch), l.s, mean[ch], s[ch]);
  });
  for (int64_t ch = 0; ch < l.c; ++ch) {
    s[ch].flush();
    split(s[ch].total_a, &sums[0 * l.c + ch], &sums[1 * l.c + ch]);
    split(s[ch].total_b, &sums[2 * l.c + ch], &sums[3 * l.c + ch]);
  }
  return absl::OkStatus();
}

// The gradient of y = (x - mean) * invstd * gamma + beta, mean and invstd those of the
// whole global batch (n values per channel), through y and through the statistics:
// dx = gamma * invstd * (dy - S_dy / n - (x - mean) * invstd^2 * S_dyxc / n), with S the
// global sums (batch_norm_backward's formula over the global batch). dgamma and dbeta are
// this rank's own sums.
absl::Status sync_batch_norm_backward(const dist::SyncBatchNormBackwardOp&, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  const float* gamma = a.in[1].f32();
  const float* st = a.in[2].f32();
  const float* mean = a.in[3].f32();
  const float* invstd = a.in[4].f32();
  const float* dy = a.in[5].f32();
  const float* local = a.in[6].f32();
  const float* global = a.in[7].f32();
  float* dx = a.out[0].f32();
  float* dgamma = a.out[1].f32();
  float* dbeta = a.out[2].f32();
  const Layout l(a.in[0].shape());
  std::vector<float> pf(static_cast<size_t>(l.c)), qf(static_cast<size_t>(l.c)), rf(static_cast<size_t>(l.c));
  for (int64_t ch = 0; ch < l.c; ++ch) {
    const double n = st[4 * l.c + ch];
    const double is = invstd[ch];
    dbeta[ch] = static_cast<float>(joined(local, l.c, 0, ch));
    dgamma[ch] = static_cast<float>(joined(local, l.c, 2, ch) * is);
    const double p = gamma[ch] * is;
    pf[ch] = static_cast<float>(p);
    qf[ch] = static_cast<float>(-p * is * is * joined(global, l.c, 2, ch) / n);
    rf[ch] = static_cast<float>(-p * joined(global, l.c, 0, ch) / n);
  }
  for_planes(l, a.in[0].numel() > kParallelGrain, [&](int64_t i, int64_t ch) {
    const int64_t o = l.plane(i, ch);
    const float p = pf[ch], q = qf[ch], r = rf[ch], m = mean[ch];
#pragma omp simd
    for (int64_t j = 0; j < l.s; ++j) dx[o + j] = dy[o + j] * p + (x[o + j] - m) * q + r;
  });
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(dist::BnStatsOp, DeviceType::kCPU, bn_stats);
MTC_REGISTER_KERNEL(dist::BnGradSumsOp, DeviceType::kCPU, bn_grad_sums);
MTC_REGISTER_KERNEL(dist::SyncBatchNormOp, DeviceType::kCPU, sync_batch_norm);
MTC_REGISTER_KERNEL(dist::SyncBatchNormBackwardOp, DeviceType::kCPU, sync_batch_norm_backward);

}  // namespace mtc::cpu
