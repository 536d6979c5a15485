// Shape rules, backward rule and API function of layer_norm.
#include "ops/layer_norm.h"

#include "absl/strings/str_format.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/status.h"
#include "ops/shape_ops.h"

namespace mtc {
namespace {
// check_affine: InvalidArgument unless `p` (gamma or beta) is f32 (D).
absl::Status check_affine(const TensorDesc& p, const TensorDesc& x, const char* what) {
  MTC_RETURN_IF_ERROR(expect_dtype(p, DType::kF32, what));
  if (p.shape != Shape{x.shape.back()}) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", p.str(), ", expected (D) = [", x.shape.back(), "], x's last dim"));
  }
  return absl::OkStatus();
}
// check_x: InvalidArgument unless x is f32 with at least one dim.
absl::Status check_x(const TensorDesc& x) {
  MTC_RETURN_IF_ERROR(expect_dtype(x, DType::kF32, "x"));
  if (x.shape.empty()) return absl::InvalidArgumentError("x is 0-d, expected (..., D)");
  return absl::OkStatus();
}
}  // namespace

absl::Status LayerNormOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 1 + has_gamma + has_beta));
  MTC_RETURN_IF_ERROR(check_x(in[0]));
  if (has_gamma) MTC_RETURN_IF_ERROR(check_affine(in[1], in[0], "gamma"));
  if (has_beta) MTC_RETURN_IF_ERROR(check_affine(in[1 + has_gamma], in[0], "beta"));
  if (!(eps >= 0)) return absl::InvalidArgumentError(absl::StrFormat("eps=%g, expected >= 0", eps));
  out.push_back(in[0]);
  return absl::OkStatus();
}

absl::StatusOr<TensorList> LayerNormOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  TensorList g(a.input_descs.size());
  if (!dy.defined()) return g;
  TensorList in{a.inputs[0]};
  if (has_gamma) in.push_back(a.inputs[1]);
  in.push_back(dy);
  TensorList d = call(std::make_shared<LayerNormGradOp>(eps, has_gamma, has_beta), in);
  for (size_t i = 0; i < g.size(); ++i) {
    if (a.needs_input_grad[i]) g[i] = d[i];
  }
  return g;
}

std::string LayerNormOp::attrs() const {
  return absl::StrFormat("eps=%g gamma=%d beta=%d", eps, has_gamma, has_beta);
}

absl::Status LayerNormGradOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 2 + has_gamma));
  MTC_RETURN_IF_ERROR(check_x(in[0]));
  if (has_gamma) MTC_RETURN_IF_ERROR(check_affine(in[1], in[0], "gamma"));
  const TensorDesc& dy = in[1 + has_gamma];
  if (dy != in[0]) return absl::InvalidArgumentError(absl::StrCat("gradient is ", dy.str(), ", expected ", in[0].str()));
  out.push_back(in[0]);
  const TensorDesc param{Shape{in[0].shape.back()}, DType::kF32};
  if (has_gamma) out.push_back(param);
  if (has_beta) out.push_back(param);
  return absl::OkStatus();
}

void LayerNormOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  out.push_back(all_r(in.size(), 1));
  if (in.empty()) return;
  const Shape& x = in[0].shape;
  for (int d = 0; d + 1 < static_cast<int>(x.size()); ++d) {
    if (!can_split(x, d, parts)) continue;
    Signature s = all_r(in.size(), 1);
    s.in[0] = Placement::S(d);
    s.out[0] = Placement::S(d);
    out.push_back(std::move(s));
  }
}

std::string LayerNormGradOp::attrs() const {
  return absl::StrFormat("eps=%g gamma=%d beta=%d", eps, has_gamma, has_beta);
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  TensorList in{x};
  if (gamma.defined()) in.push_back(gamma);
  if (beta.defined()) in.push_back(beta);
  return call1(std::make_shared<LayerNormOp>(eps, gamma.defined(), beta.defined()), in);
}

}  // namespace mtc
