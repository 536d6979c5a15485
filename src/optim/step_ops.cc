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

// ---- DTP tables ----
namespace {
void step_signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) {
  out.push_back(sbp::all_r(in.size(), 0));
  if (in.empty()) return;
  for (int d = 0; d < static_cast<int>(in[0].shape.size()); ++d) {
    if (sbp::can_split(in[0].shape, d, parts)) {
      out.push_back(sbp::uniform(in.size(), partition::Placement::S(d), 0, partition::Placement::R()));
    }
  }
}
}  // namespace

void SgdStepOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  step_signatures(in, parts, out);
}
void AdamWStepOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  step_signatures(in, parts, out);
}

}  // namespace mtc::optim
