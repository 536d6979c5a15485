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
  g[0] = call1(std::make_shared<EmbeddingGradOp>(a.input_descs[0].shape[0], offset, global_vocab), {a.inputs[1], dy});
  return g;
}

std::string EmbeddingOp::attrs() const {
  return masked() ? absl::StrCat("rows=", offset, "+ of ", global_vocab) : "";
}

void EmbeddingOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  out.push_back(all_r(in.size(), 1));
  std::vector<TensorDesc> y;
  if (in.size() != 2 || !infer(in, y).ok()) return;
  const Shape& w = in[0].shape;
  const Shape& idx = in[1].shape;
  if (can_split(w, 1, parts)) {
    out.push_back(sig({Placement::S(1), Placement::R()}, {Placement::S(static_cast<int>(idx.size()))}, Mode::kP4));
  }
  if (can_split(w, 0, parts)) out.push_back(sig({Placement::S(0), Placement::R()}, {Placement::P()}, Mode::kP3));
  for (int d = 0; d < static_cast<int>(idx.size()); ++d) {
    if (can_split(idx, d, parts)) out.push_back(sig({Placement::R(), Placement::S(d)}, {Placement::S(d)}, Mode::kP1));
  }
}

std::shared_ptr<const OpDef> EmbeddingOp::shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                                   const ShardContext& g) const {
  // The vocabulary split: this rank's rows of the table, zeros for the others' indices.
  if (s.in.empty() || !s.in[0].split() || s.in[0].dim != 0 || in.empty()) return nullptr;
  const int64_t v = in[0].shape[0];
  return std::make_shared<EmbeddingOp>(offset + partition::shard_range(v, g.parts, g.index).offset,
                                       masked() ? global_vocab : v);
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

absl::StatusOr<TensorList> EmbeddingGradOp::backward(const BackwardArgs& a) const {
  const Tensor& dw = a.grad_outputs[0];
  TensorList g(2);  // indices get no gradient
  if (!dw.defined() || !a.needs_input_grad[1]) return g;
  auto gather = masked() ? std::make_shared<EmbeddingOp>(offset, global_vocab) : std::make_shared<EmbeddingOp>();
  g[1] = call1(gather, {dw, a.inputs[0]});
  return g;
}

std::string EmbeddingGradOp::attrs() const {
  return masked() ? absl::StrCat("V=", vocab, " rows=", offset, "+ of ", global_vocab) : absl::StrCat("V=", vocab);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return call1(std::make_shared<EmbeddingOp>(), {weight, indices});
}

Tensor scatter_add_rows(const Tensor& src, const Tensor& indices, int64_t rows) {
  return call1(std::make_shared<EmbeddingGradOp>(rows), {indices, src});
}

}  // namespace mtc
