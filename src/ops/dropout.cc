// Shape rule, backward rule and API function of dropout.
#include "ops/dropout.h"

#include "absl/strings/str_format.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"
#include "mtc/status.h"
#include "ops/shape_ops.h"

namespace mtc {

absl::Status DropoutOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 1));
  MTC_RETURN_IF_ERROR(expect_dtype(in[0], DType::kF32, "input"));
  if (!(p >= 0.f && p < 1.f)) return absl::InvalidArgumentError(absl::StrFormat("p=%g is outside [0, 1)", p));
  out.push_back(in[0]);
  return absl::OkStatus();
}

absl::StatusOr<TensorList> DropoutOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return TensorList(1);
  return TensorList{call1(std::make_shared<DropoutOp>(p, seed), {dy})};
}

std::string DropoutOp::attrs() const { return absl::StrFormat("p=%g seed=%#x", p, seed); }

void DropoutOp::signatures(std::span<const TensorDesc> in, int, partition::SignatureList& out) const {
  out.push_back(sbp::all_r(in.size(), 1));
  if (in.size() == 1) out.push_back(sbp::sig({partition::Placement::P()}, {partition::Placement::P()}));
}

Tensor dropout(const Tensor& x, float p, bool training) {
  const bool valid = p >= 0.f && p < 1.f;
  if (valid && (!training || p == 0.f)) return x;
  // An invalid p still issues the op, whose infer reports it.
  return call1(std::make_shared<DropoutOp>(p, Runtime::current().next_seed()), {x});
}

}  // namespace mtc
