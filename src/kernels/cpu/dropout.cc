// CPU kernel of dropout: y = keep(seed, i) ? x * 1/(1-p) : 0, element by element, with
// keep from the counter-based generator in ops/dropout.h. Any split across threads draws
// the same bits.
#include "kernels/cpu/cpu_util.h"
#include "ops/dropout.h"

namespace mtc::cpu {
namespace {

absl::Status dropout(const DropoutOp& op, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  float* y = a.out[0].f32();
  const int64_t n = a.out[0].numel();
  const float s = 1.f / (1.f - op.p);
  const uint64_t seed = op.seed, threshold = dropout_threshold(op.p);
#pragma omp parallel for simd if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = dropout_draw(seed, static_cast<uint64_t>(i)) >= threshold ? x[i] * s : 0.f;
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(DropoutOp, DeviceType::kCPU, dropout);

}  // namespace mtc::cpu
