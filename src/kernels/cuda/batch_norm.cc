// CUDA kernels of batch_norm and its backward, on our own reductions (dnn_norm.cu) rather
// than cuDNN's batch normalization, for three reasons:
//  - x is (N, C, ...) of any rank, where cuDNN's legacy calls take 4-D or 5-D tensors;
//  - the sums must be deterministic: DTE recomputes batch_norm and its backward expecting
//    the same bits, and cuDNN's kernels may reduce in an order that varies between runs;
//  - the formulas can then be the CPU kernel's (src/kernels/cpu/batch_norm.cc): a shifted
//    one-pass variance, the unbiased variance and `momentum` in the running statistics,
//    invstd = 1/sqrt(var + eps) in double, and the mutation skipped when recomputing.
// Each channel's n * s values are summed in double in fixed ranges, then per channel.
#include <cstdint>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/dnn_norm_launch.h"
#include "mtc/status.h"
#include "ops/batch_norm.h"

namespace mtc::cuda {
namespace {

// NCS: x viewed as (n, c, s), s the product of the trailing dims.
struct NCS {
  int64_t n, c, s;
  explicit NCS(const Shape& x) : n(x[0]), c(x[1]), s(1) {
    for (size_t i = 2; i < x.size(); ++i) s *= x[i];
  }
  int64_t count() const { return n * s; }  // values per channel
};

// take_scratch: one scratch block holding the per-(channel, part) double sums (null when
// there are none), followed by `extra_floats` floats (null when none).
struct Scratch {
  double* partial = nullptr;
  float* extra = nullptr;
};
absl::StatusOr<Scratch> take_scratch(KernelContext& ctx, int64_t c, int64_t parts, int64_t extra_floats) {
  const size_t partial_bytes = static_cast<size_t>(channel_partials_doubles(c, parts)) * sizeof(double);
  const size_t bytes = partial_bytes + static_cast<size_t>(extra_floats) * sizeof(float);
  Scratch s;
  if (bytes == 0) return s;
  MTC_ASSIGN_OR_RETURN(void* p, ctx.scratch(bytes));
  if (partial_bytes > 0) s.partial = static_cast<double*>(p);
  if (extra_floats > 0) s.extra = reinterpret_cast<float*>(static_cast<char*>(p) + partial_bytes);
  return s;
}

absl::Status batch_norm(const BatchNormOp& op, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  const float* gamma = a.in[1].f32();
  const float* beta = a.in[2].f32();
  float* y = a.out[0].f32();
  float* mean = a.out[1].f32();
  float* invstd = a.out[2].f32();
  const NCS l(a.in[0].shape());
  cudaStream_t st = stream(a.ctx);
  if (op.training) {
    // infer guarantees more than one value per channel in training.
    const int64_t parts = channel_parts(l.count(), l.c);
    MTC_ASSIGN_OR_RETURN(const Scratch s, take_scratch(a.ctx, l.c, parts, 0));
    launch_bn_moments(x, l.n, l.c, l.s, parts, s.partial, st);
    MTC_RETURN_IF_ERROR(last_launch("bn_moments"));
    // A recompute must not update the running statistics a second time.
    const bool update = op.tracks_running && !a.ctx.recomputing();
    float* rmean = update ? a.in[3].f32() : nullptr;
    float* rvar = update ? a.in[4].f32() : nullptr;
    launch_bn_train_stats(s.partial, x, l.n, l.c, l.s, parts, op.eps, op.momentum, rmean, rvar, mean, invstd,
                          st);
    MTC_RETURN_IF_ERROR(last_launch("bn_train_stats"));
  } else {
    launch_bn_eval_stats(a.in[3].f32(), a.in[4].f32(), l.c, op.eps, mean, invstd, st);
    MTC_RETURN_IF_ERROR(last_launch("bn_eval_stats"));
  }
  launch_bn_normalize(x, gamma, beta, mean, invstd, y, l.n, l.c, l.s, st);
  return last_launch("bn_normalize");
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
  cudaStream_t st = stream(a.ctx);
  const int64_t parts = channel_parts(l.count(), l.c);
  // Scratch: the partials, then (p, q, r) per channel for dx = dy * p + (x - mean) * q + r.
  MTC_ASSIGN_OR_RETURN(const Scratch s, take_scratch(a.ctx, l.c, parts, 3 * l.c));
  launch_bn_grad_sums(x, dy, mean, l.n, l.c, l.s, parts, s.partial, st);
  MTC_RETURN_IF_ERROR(last_launch("bn_grad_sums"));
  launch_bn_grad_finalize(s.partial, gamma, invstd, l.c, l.count(), parts, op.training, dgamma, dbeta,
                          s.extra, st);
  MTC_RETURN_IF_ERROR(last_launch("bn_grad_finalize"));
  launch_bn_backward_dx(x, dy, mean, s.extra, dx, l.n, l.c, l.s, st);
  return last_launch("bn_backward_dx");
}

}  // namespace

MTC_REGISTER_KERNEL(BatchNormOp, DeviceType::kCUDA, batch_norm);
MTC_REGISTER_KERNEL(BatchNormBackwardOp, DeviceType::kCUDA, batch_norm_backward);

}  // namespace mtc::cuda
