// CUDA kernels of synchronised batch norm's ops (src/dist/sync_batch_norm.h): bn_stats,
// sync_batch_norm, bn_grad_sums and sync_batch_norm_backward, on x viewed as
// (N, C, S) as on the CPU. Per-channel sums in double, deterministic (ew_sync_bn.cu);
// stats keep the CPU's hi/lo split. The running statistics are left alone when the op
// is recomputed (DTE), as the CPU kernel does.
//
// One difference: the CPU kernel reads each channel's global count on the host and
// fails when it is not above 1. Here the stats live on the GPU and a kernel never waits
// for the host, so that check is not made; such a channel gives inf / NaN instead.
#include "dist/sync_batch_norm.h"

#include <algorithm>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ew_sync_bn_launch.h"

namespace mtc::cuda {
namespace {

struct Layout {
  int64_t n, c, s;
  explicit Layout(const Shape& x) : n(x[0]), c(x[1]), s(numel(x) / std::max<int64_t>(x[0] * x[1], 1)) {}
};

absl::Status bn_stats(const dist::BnStatsOp&, const KernelArgs& a) {
  const Layout l(a.in[0].shape());
  if (l.c == 0) return absl::OkStatus();
  MTC_ASSIGN_OR_RETURN(void* scratch, a.ctx.scratch(bn_partials_bytes(l.c, l.n * l.s)));
  launch_bn_stats(a.in[0].f32(), a.out[0].f32(), l.n, l.c, l.s, scratch, stream(a.ctx));
  return last_launch("bn_stats");
}

// in: x, gamma, beta, stats[, running_mean, running_var]; out: y, mean, invstd.
absl::Status sync_batch_norm(const dist::SyncBatchNormOp& op, const KernelArgs& a) {
  const Layout l(a.in[0].shape());
  if (l.c == 0) return absl::OkStatus();
  const bool update = op.tracks_running && !a.ctx.recomputing();
  float* rm = update ? a.in[4].f32() : nullptr;
  float* rv = update ? a.in[5].f32() : nullptr;
  MTC_ASSIGN_OR_RETURN(void* scratch, a.ctx.scratch(sync_bn_forward_bytes(l.c)));
  launch_sync_bn_forward(a.in[0].f32(), a.in[1].f32(), a.in[2].f32(), a.in[3].f32(), a.out[0].f32(),
                         a.out[1].f32(), a.out[2].f32(), rm, rv, op.momentum, op.eps, l.n, l.c, l.s, scratch,
                         stream(a.ctx));
  return last_launch("sync_batch_norm");
}

// in: x, mean, dy; out: sums.
absl::Status bn_grad_sums(const dist::BnGradSumsOp&, const KernelArgs& a) {
  const Layout l(a.in[0].shape());
  if (l.c == 0) return absl::OkStatus();
  MTC_ASSIGN_OR_RETURN(void* scratch, a.ctx.scratch(bn_partials_bytes(l.c, l.n * l.s)));
  launch_bn_grad_sums(a.in[0].f32(), a.in[1].f32(), a.in[2].f32(), a.out[0].f32(), l.n, l.c, l.s, scratch,
                      stream(a.ctx));
  return last_launch("bn_grad_sums");
}

// in: x, gamma, stats, mean, invstd, dy, sums, global_sums; out: dx, dgamma, dbeta.
absl::Status sync_batch_norm_backward(const dist::SyncBatchNormBackwardOp&, const KernelArgs& a) {
  const Layout l(a.in[0].shape());
  if (l.c == 0) return absl::OkStatus();
  MTC_ASSIGN_OR_RETURN(void* scratch, a.ctx.scratch(sync_bn_backward_bytes(l.c)));
  launch_sync_bn_backward(a.in[0].f32(), a.in[1].f32(), a.in[2].f32(), a.in[3].f32(), a.in[4].f32(),
                          a.in[5].f32(), a.in[6].f32(), a.in[7].f32(), a.out[0].f32(), a.out[1].f32(),
                          a.out[2].f32(), l.n, l.c, l.s, scratch, stream(a.ctx));
  return last_launch("sync_batch_norm_backward");
}

}  // namespace

MTC_REGISTER_KERNEL(dist::BnStatsOp, DeviceType::kCUDA, bn_stats);
MTC_REGISTER_KERNEL(dist::BnGradSumsOp, DeviceType::kCUDA, bn_grad_sums);
MTC_REGISTER_KERNEL(dist::SyncBatchNormOp, DeviceType::kCUDA, sync_batch_norm);
MTC_REGISTER_KERNEL(dist::SyncBatchNormBackwardOp, DeviceType::kCUDA, sync_batch_norm_backward);

}  // namespace mtc::cuda
