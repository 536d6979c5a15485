// Shape rules and attributes of the optimizer step ops (see step_ops.h).
#include "optim/step_ops.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mtc::optim {
namespace {
// same_f32: n inputs, all f32 of input 0's shape.
absl::Status same_f32(std::span<const TensorDesc> in, size_t n, const char* names) {
  if (in.size() != n)
    return absl::InvalidArgumentError(absl::StrCat("expected ", n, " inputs (", names, "), got ", in.size()));
  for (size_t i = 0; i < n; ++i) {
    if (in[i].dtype != DType::kF32 || in[i].shape != in[0].shape) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", in[i].str(), ", expected ",
                                                     TensorDesc{in[0].shape, DType::kF32}.str(),
                                                     " (inputs: ", names, ")"));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status SgdStepOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>&) const {
  return momentum != 0.f ? same_f32(in, 3, "param, grad, momentum_buffer") : same_f32(in, 2, "param, grad");
}
std::string SgdStepOp::attrs() const {
  return absl::StrFormat("lr=%g momentum=%g dampening=%g weight_decay=%g nesterov=%d first=%d", lr, momentum,
                         dampening, weight_decay, nesterov, first);
}

absl::Status AdamWStepOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>&) const {
  return same_f32(in, 4, "param, grad, exp_avg, exp_avg_sq");
}
std::string AdamWStepOp::attrs() const {
  return absl::StrFormat("decay=%g beta1=%g beta2=%g eps=%g step_size=%g bias_correction2_sqrt=%g", decay,
                         beta1, beta2, eps, step_size, bias_correction2_sqrt);
}

}  // namespace mtc::optim
