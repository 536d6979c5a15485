// Shape rules, backward rules and API functions of softmax, log_softmax and cross_entropy.
#include "ops/softmax.h"

#include "absl/strings/str_cat.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/status.h"
#include "ops/shape_ops.h"

namespace mtc {

// ---- softmax / log_softmax ----
OpSchema& SoftmaxOp::softmax_schema() { static OpSchema s("softmax"); return s; }
OpSchema& SoftmaxOp::log_softmax_schema() { static OpSchema s("log_softmax"); return s; }
const OpSchema& SoftmaxOp::schema() const { return log ? log_softmax_schema() : softmax_schema(); }

absl::Status SoftmaxOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 1));
  MTC_RETURN_IF_ERROR(expect_dtype(in[0], DType::kF32, "input"));
  MTC_RETURN_IF_ERROR(resolve_dim(dim, static_cast<int>(in[0].shape.size())).status());
  out.push_back(in[0]);
  return absl::OkStatus();
}

absl::StatusOr<TensorList> SoftmaxOp::backward(const BackwardArgs& a) const {
  if (!a.grad_outputs[0].defined()) return TensorList(1);
  return TensorList{call1(std::make_shared<SoftmaxGradOp>(dim, log), {a.outputs[0], a.grad_outputs[0]})};
}

std::string SoftmaxOp::attrs() const { return absl::StrCat("dim=", dim); }

OpSchema& SoftmaxGradOp::softmax_grad_schema() { static OpSchema s("softmax_grad"); return s; }
OpSchema& SoftmaxGradOp::log_softmax_grad_schema() { static OpSchema s("log_softmax_grad"); return s; }
const OpSchema& SoftmaxGradOp::schema() const { return log ? log_softmax_grad_schema() : softmax_grad_schema(); }

absl::Status SoftmaxGradOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 2));
  MTC_RETURN_IF_ERROR(expect_dtype(in[0], DType::kF32, "output"));
  MTC_RETURN_IF_ERROR(expect_dtype(in[1], DType::kF32, "gradient"));
  if (in[0].shape != in[1].shape) return absl::InvalidArgumentError("output and gradient differ in shape");
  MTC_RETURN_IF_ERROR(resolve_dim(dim, static_cast<int>(in[0].shape.size())).status());
  out.push_back(in[0]);
  return absl::OkStatus();
}

std::string SoftmaxGradOp::attrs() const { return absl::StrCat("dim=", dim); }

// ---- cross_entropy ----
absl::Status check_cross_entropy_inputs(const TensorDesc& logits, const TensorDesc& labels) {
  MTC_RETURN_IF_ERROR(expect_dtype(logits, DType::kF32, "logits"));
  MTC_RETURN_IF_ERROR(expect_dtype(labels, DType::kI32, "labels"));
  if (logits.shape.size() != 2 || logits.shape[1] < 1) {
    return absl::InvalidArgumentError(absl::StrCat("logits are ", logits.str(), ", expected (N, C) with C >= 1"));
  }
  if (labels.shape != Shape{logits.shape[0]}) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels are ", labels.str(), ", expected (N) = [", logits.shape[0], "] to match the logits"));
  }
  return absl::OkStatus();
}

absl::Status CrossEntropyOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 2));
  MTC_RETURN_IF_ERROR(check_cross_entropy_inputs(in[0], in[1]));
  out.emplace_back();  // f32 []
  return absl::OkStatus();
}

OpCost CrossEntropyOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  OpCost c = OpDef::cost(in, out);
  c.flops = 4.0 * static_cast<double>(in[0].numel());  // max, exp, sum, subtract: per logit
  return c;
}

absl::StatusOr<TensorList> CrossEntropyOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  TensorList g(2);  // labels get no gradient
  if (!dy.defined() || !a.needs_input_grad[0]) return g;
  g[0] = call1(std::make_shared<CrossEntropyGradOp>(divisor), {a.inputs[0], a.inputs[1], dy});
  return g;
}

absl::Status CrossEntropyGradOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 3));
  MTC_RETURN_IF_ERROR(check_cross_entropy_inputs(in[0], in[1]));
  MTC_RETURN_IF_ERROR(expect_dtype(in[2], DType::kF32, "gradient"));
  if (in[2].numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("gradient is ", in[2].str(), ", expected one element"));
  }
  out.push_back(in[0]);
  return absl::OkStatus();
}

std::string CrossEntropyOp::attrs() const { return divisor > 0 ? absl::StrCat("divisor=", divisor) : ""; }
std::string CrossEntropyGradOp::attrs() const { return divisor > 0 ? absl::StrCat("divisor=", divisor) : ""; }

// ---- DTP tables ----
void SoftmaxOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  out.push_back(all_r(in.size(), 1));
  if (in.size() != 1) return;
  const Shape& x = in[0].shape;
  const absl::StatusOr<int> k = resolve_dim(dim, static_cast<int>(x.size()));
  if (!k.ok()) return;
  for (int d = 0; d < static_cast<int>(x.size()); ++d) {
    if (d != *k && can_split(x, d, parts)) out.push_back(sig({Placement::S(d)}, {Placement::S(d)}));
  }
}

void CrossEntropyOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  out.push_back(all_r(in.size(), 1));
  if (in.size() != 2 || !check_cross_entropy_inputs(in[0], in[1]).ok()) return;
  if (can_split(in[0].shape, 0, parts)) out.push_back(sig({Placement::S(0), Placement::S(0)}, {Placement::P()}));
}

std::shared_ptr<const OpDef> CrossEntropyOp::shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                                      const ShardContext&) const {
  // Each rank's mean over its rows, divided by the global N: the ranks' losses sum to the
  // global mean.
  if (s.out.empty() || !s.out[0].partial() || in.empty() || in[0].shape.empty()) return nullptr;
  return std::make_shared<CrossEntropyOp>(cross_entropy_divisor(divisor, in[0].shape[0]));
}

// ---- API ----
Tensor softmax(const Tensor& x, int dim) { return call1(std::make_shared<SoftmaxOp>(dim, false), {x}); }
Tensor log_softmax(const Tensor& x, int dim) { return call1(std::make_shared<SoftmaxOp>(dim, true), {x}); }
Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  return call1(std::make_shared<CrossEntropyOp>(), {logits, labels});
}

// ---- topk ----
absl::Status TopkOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 1));
  const TensorDesc& x = in[0];
  if (x.dtype != DType::kF32 || x.shape.empty() || k < 1 || k > x.shape.back()) {
    return absl::InvalidArgumentError(absl::StrCat("topk: k ", k, " of ", x.str(),
                                                   ": expected f32 values with at least k along the last dim"));
  }
  Shape s = x.shape;
  s.back() = k;
  out.push_back(TensorDesc{s, DType::kI32});
  return absl::OkStatus();
}

std::string TopkOp::attrs() const { return absl::StrCat("k=", k); }

Tensor topk(const Tensor& x, int k) {
  NoGradGuard no_grad;
  return call1(std::make_shared<TopkOp>(k), {x});
}

}  // namespace mtc
