// Shape rules, backward rule and API function of embedding.
#include "ops/embedding.h"

#include "absl/strings/str_cat.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/status.h"
#include "ops/shape_ops.h"

namespace mtc {

absl::Status EmbeddingOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 2));
  MTC_RETURN_IF_ERROR(expect_dtype(in[0], DType::kF32, "weight"));
  MTC_RETURN_IF_ERROR(expect_dtype(in[1], DType::kI32, "indices"));
  if (in[0].shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("weight is ", in[0].str(), ", expected (V, D)"));
  }
  Shape s = in[1].shape;
  s.push_back(in[0].shape[1]);
  out.push_back(TensorDesc{std::move(s), DType::kF32});
  return absl::OkStatus();
}

absl::StatusOr<TensorList> EmbeddingOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  TensorList g(2);  // indices get no gradient
  if (!dy.defined() || !a.needs_input_grad[0]) return g;
  g[0] = call1(std::make_shared<EmbeddingGradOp>(a.input_descs[0].shape[0]), {a.inputs[1], dy});
  return g;
}

absl::Status EmbeddingGradOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 2));
  MTC_RETURN_IF_ERROR(expect_dtype(in[0], DType::kI32, "indices"));
  MTC_RETURN_IF_ERROR(expect_dtype(in[1], DType::kF32, "gradient"));
  const Shape& is = in[0].shape;
  const Shape& gs = in[1].shape;
  if (gs.size() != is.size() + 1 || !std::equal(is.begin(), is.end(), gs.begin())) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient is ", in[1].str(), ", expected the indices' shape ", shape_str(is), " then D"));
  }
  if (vocab < 0) return absl::InvalidArgumentError(absl::StrCat("vocabulary size ", vocab, " is negative"));
  out.push_back(TensorDesc{Shape{vocab, gs.back()}, DType::kF32});
  return absl::OkStatus();
}

std::string EmbeddingGradOp::attrs() const { return absl::StrCat("V=", vocab); }

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return call1(std::make_shared<EmbeddingOp>(), {weight, indices});
}

}  // namespace mtc
