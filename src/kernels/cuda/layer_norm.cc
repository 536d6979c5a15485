// CUDA kernels of layer_norm and its gradient (nn_norm.cu): one block per row, statistics
// in double with the CPU kernel's two passes, dgamma / dbeta summed in double over fixed
// row chunks added in order, so results are deterministic and match the CPU within
// rounding (the reductions' order differs, in double).
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/nn_norm_launch.h"
#include "mtc/status.h"
#include "ops/layer_norm.h"

namespace mtc::cuda {
namespace {

absl::Status layer_norm(const LayerNormOp& op, const KernelArgs& a) {
  const int64_t d = a.in[0].dim(-1), rows = d == 0 ? 0 : a.in[0].numel() / d;
  const float* gamma = op.has_gamma ? a.in[1].f32() : nullptr;
  const float* beta = op.has_beta ? a.in[1 + op.has_gamma].f32() : nullptr;
  launch_layer_norm(a.in[0].f32(), gamma, beta, a.out[0].f32(), rows, d, op.eps, stream(a.ctx));
  return last_launch("layer_norm");
}

absl::Status layer_norm_grad(const LayerNormGradOp& op, const KernelArgs& a) {
  const int64_t d = a.in[0].dim(-1), rows = d == 0 ? 0 : a.in[0].numel() / d;
  if (d == 0) return absl::OkStatus();
  const float* gamma = op.has_gamma ? a.in[1].f32() : nullptr;
  const float* dy = a.in[1 + op.has_gamma].f32();
  float* dgamma = op.has_gamma ? a.out[1].f32() : nullptr;
  float* dbeta = op.has_beta ? a.out[1 + op.has_gamma].f32() : nullptr;
  MTC_ASSIGN_OR_RETURN(void* scratch, a.ctx.scratch(layer_norm_grad_scratch_bytes(rows, d)));
  launch_layer_norm_grad(a.in[0].f32(), gamma, dy, a.out[0].f32(), dgamma, dbeta, rows, d, op.eps, scratch,
                         stream(a.ctx));
  return last_launch("layer_norm_grad");
}

}  // namespace

MTC_REGISTER_KERNEL(LayerNormOp, DeviceType::kCUDA, layer_norm);
MTC_REGISTER_KERNEL(LayerNormGradOp, DeviceType::kCUDA, layer_norm_grad);

}  // namespace mtc::cuda
