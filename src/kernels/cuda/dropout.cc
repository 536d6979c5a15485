// CUDA kernel of dropout: the CPU kernel's mask (ops/dropout.h's counter-based generator,
// ported to the device in nn_dropout.cu) and its float scale, so the result is the CPU's
// bit for bit and a DTE recompute reproduces it.
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/nn_dropout_launch.h"
#include "ops/dropout.h"

namespace mtc::cuda {
namespace {

absl::Status dropout(const DropoutOp& op, const KernelArgs& a) {
  const float s = 1.f / (1.f - op.p);  // in float, as the CPU kernel computes it
  launch_dropout(a.in[0].f32(), a.out[0].f32(), a.out[0].numel(), op.seed, dropout_threshold(op.p), s,
                 stream(a.ctx));
  return last_launch("dropout");
}

}  // namespace

MTC_REGISTER_KERNEL(DropoutOp, DeviceType::kCUDA, dropout);

}  // namespace mtc::cuda
