// CUDA kernels of softmax, log_softmax, their gradient, cross_entropy and its gradient, topk
// (nn_norm.cu), with the CPU kernels' arithmetic: exp in float where the CPU takes it in
// float, sums in double, a deterministic reduction order.
//
// Labels: the CPU kernels fail with InvalidArgument naming the first label outside
// [0, C). A kernel cannot return a status, so these two kernels check the labels on the
// device first and read the answer back, synchronising the compute stream (the only host
// waits in these kernels, once per loss evaluation). Without the check a bad label would
// give a NaN loss rather than an error.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/nn_index_launch.h"
#include "kernels/cuda/nn_norm_launch.h"
#include "mtc/status.h"
#include "ops/shape_ops.h"
#include "ops/softmax.h"

namespace mtc::cuda {
namespace {

absl::Status softmax(const SoftmaxOp& op, const KernelArgs& a) {
  const TensorView& xv = a.in[0];
  MTC_ASSIGN_OR_RETURN(const int dim, resolve_dim(op.dim, xv.ndim()));
  const DimSplit s = split_at_dim(xv.shape(), dim);
  launch_softmax(xv.f32(), a.out[0].f32(), s.outer, s.size, s.inner, op.log, stream(a.ctx));
  return last_launch(op.log ? "log_softmax" : "softmax");
}

absl::Status softmax_grad(const SoftmaxGradOp& op, const KernelArgs& a) {
  const TensorView& yv = a.in[0];
  MTC_ASSIGN_OR_RETURN(const int dim, resolve_dim(op.dim, yv.ndim()));
  const DimSplit s = split_at_dim(yv.shape(), dim);
  launch_softmax_grad(yv.f32(), a.in[1].f32(), a.out[0].f32(), s.outer, s.size, s.inner, op.log,
                      stream(a.ctx));
  return last_launch(op.log ? "log_softmax_grad" : "softmax_grad");
}

// check_labels: the CPU kernel's error for the first label outside [0, c), found on the device.
absl::Status check_labels(const KernelArgs& a, int64_t n, int64_t c) {
  MTC_ASSIGN_OR_RETURN(void* slot, a.ctx.scratch(sizeof(uint64_t)));
  int64_t bad = -1;
  int32_t label = 0;
  MTC_CUDA(find_out_of_range(a.in[1].i32(), n, c, slot, &bad, &label, stream(a.ctx)));
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("label ", label, " at position ", bad, " is out of range for C = ", c, " classes"));
}

absl::Status cross_entropy(const CrossEntropyOp& op, const KernelArgs& a) {
  const int64_t n = a.in[0].dim(0), c = a.in[0].dim(1);
  MTC_RETURN_IF_ERROR(check_labels(a, n, c));
  MTC_ASSIGN_OR_RETURN(void* loss, a.ctx.scratch(cross_entropy_scratch_bytes(n)));
  launch_cross_entropy(a.in[0].f32(), a.in[1].i32(), n, c, cross_entropy_divisor(op.divisor, n), a.out[0].f32(), loss,
                       stream(a.ctx));
  return last_launch("cross_entropy");
}

absl::Status cross_entropy_grad(const CrossEntropyGradOp& op, const KernelArgs& a) {
  const int64_t n = a.in[0].dim(0), c = a.in[0].dim(1);
  MTC_RETURN_IF_ERROR(check_labels(a, n, c));
  launch_cross_entropy_grad(a.in[0].f32(), a.in[1].i32(), a.in[2].f32(), n, c, cross_entropy_divisor(op.divisor, n),
                            a.out[0].f32(), stream(a.ctx));
  return last_launch("cross_entropy_grad");
}

absl::Status topk(const TopkOp& op, const KernelArgs& a) {
  const int64_t c = a.in[0].shape().back(), rows = c > 0 ? a.in[0].numel() / c : 0;
  launch_topk(a.in[0].f32(), rows, c, op.k, a.out[0].i32(), stream(a.ctx));
  return last_launch("topk");
}

}  // namespace

MTC_REGISTER_KERNEL(TopkOp, DeviceType::kCUDA, topk);
MTC_REGISTER_KERNEL(CrossEntropyOp, DeviceType::kCUDA, cross_entropy);
MTC_REGISTER_KERNEL(CrossEntropyGradOp, DeviceType::kCUDA, cross_entropy_grad);

static const bool registered_softmax = [] {
  constexpr int cuda = static_cast<int>(DeviceType::kCUDA);
  auto fwd = [](const OpDef& op, const KernelArgs& a) {
    return softmax(static_cast<const SoftmaxOp&>(op), a);
  };
  auto bwd = [](const OpDef& op, const KernelArgs& a) {
    return softmax_grad(static_cast<const SoftmaxGradOp&>(op), a);
  };
  SoftmaxOp::softmax_schema().kernels[cuda] = fwd;
  SoftmaxOp::log_softmax_schema().kernels[cuda] = fwd;
  SoftmaxGradOp::softmax_grad_schema().kernels[cuda] = bwd;
  SoftmaxGradOp::log_softmax_grad_schema().kernels[cuda] = bwd;
  return true;
}();

}  // namespace mtc::cuda
