// Shape rules, cost estimates, backward rules and API functions of matmul and linear.
#include "ops/matmul.h"

#include "absl/strings/str_cat.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/status.h"
#include "ops/elementwise.h"

namespace mtc {
namespace {

absl::Status expect_f32(std::span<const TensorDesc> in, size_t n) {
  if (in.size() != n) return absl::InvalidArgumentError(absl::StrCat("expected ", n, " inputs, got ", in.size()));
  for (size_t i = 0; i < n; ++i) {
    if (in[i].dtype != DType::kF32) return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", in[i].str(), ", expected f32"));
  }
  return absl::OkStatus();
}

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

OpCost gemm_cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out, double flops) {
  OpCost c;
  for (const TensorDesc& d : in) c.bytes_read += static_cast<double>(d.bytes());
  for (const TensorDesc& d : out) c.bytes_written += static_cast<double>(d.bytes());
  c.flops = flops;
  return c;
}

// linear_rows: x (..., IN) as a matrix of rows.
int64_t linear_rows(const TensorDesc& x) { return x.numel() / std::max<int64_t>(x.shape.back(), 1); }

}  // namespace

// ---- matmul ----
absl::Status MatmulOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_f32(in, 2));
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  if (a.size() < 2 || b.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("a is ", shape_str(a), " and b ", shape_str(b),
                                                   ": expected at least 2-D operands (..., M, K) and (..., K, N)"));
  }
  const size_t na = a.size(), nb = b.size();
  const int64_t m = trans_a ? a[na - 1] : a[na - 2], ka = trans_a ? a[na - 2] : a[na - 1];
  const int64_t kb = trans_b ? b[nb - 1] : b[nb - 2], n = trans_b ? b[nb - 2] : b[nb - 1];
  if (ka != kb) {
    return absl::InvalidArgumentError(absl::StrCat("a ", shape_str(a), " has K = ", ka, " but b ", shape_str(b), " has K = ",
                                                   kb, ": expected (..., M, K) x (..., K, N)",
                                                   trans_a || trans_b ? " after the transposes" : ""));
  }
  MTC_ASSIGN_OR_RETURN(Shape y, broadcast_shape(batch_of(a), batch_of(b)));
  y.push_back(m);
  y.push_back(n);
  out.push_back(TensorDesc{std::move(y), DType::kF32});
  return absl::OkStatus();
}

OpCost MatmulOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  const Shape& a = in[0].shape;
  const int64_t k = trans_a ? a[a.size() - 2] : a.back();
  return gemm_cost(in, out, 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(k));
}

absl::StatusOr<TensorList> MatmulOp::backward(const BackwardArgs& g) const {
  const Tensor& dy = g.grad_outputs[0];
  TensorList grads(2);
  if (!dy.defined()) return grads;
  const Tensor& a = g.inputs[0];
  const Tensor& b = g.inputs[1];
  const Shape& as = g.input_descs[0].shape;
  const Shape& bs = g.input_descs[1].shape;
  // y = A B with A = op(a), B = op(b): dA = dy B^T, dB = A^T dy; a transposed operand takes
  // the transpose of its gradient.
  if (g.needs_input_grad[0]) {
    Tensor da = trans_a ? call1(std::make_shared<MatmulOp>(trans_b, true), {b, dy})
                        : call1(std::make_shared<MatmulOp>(false, !trans_b), {dy, b});
    grads[0] = sum_to(da, as);
  }
  if (g.needs_input_grad[1]) {
    if (bs.size() == 2 && as.size() > 2 && !trans_a) {
      // b applies to every batch of a: fold the batch into rows, one GEMM instead of a
      // batch of products summed afterwards.
      Tensor a2 = reshape(a, {-1, as.back()});
      Tensor dy2 = reshape(dy, {-1, dy.shape().back()});
      grads[1] = trans_b ? call1(std::make_shared<MatmulOp>(true, false), {dy2, a2})
                         : call1(std::make_shared<MatmulOp>(true, false), {a2, dy2});
    } else {
      Tensor db = trans_b ? call1(std::make_shared<MatmulOp>(true, trans_a), {dy, a})
                          : call1(std::make_shared<MatmulOp>(!trans_a, false), {a, dy});
      grads[1] = sum_to(db, bs);
    }
  }
  return grads;
}

MatmulOp::Plan MatmulOp::plan(const Shape& a, const Shape& b, const Shape& y) const {
  Plan p;
  const size_t nd = y.size();
  p.m = y[nd - 2];
  p.n = y[nd - 1];
  p.k = trans_a ? a[a.size() - 2] : a.back();
  p.a_batch.assign(a.begin(), a.end() - 2);
  p.b_batch.assign(b.begin(), b.end() - 2);
  p.y_batch.assign(y.begin(), y.end() - 2);
  p.batches = numel(p.y_batch);
  p.fold = numel(p.b_batch) == 1 && !trans_a && numel(p.a_batch) == p.batches;
  return p;
}

std::string MatmulOp::attrs() const {
  return absl::StrCat(trans_a ? "trans_a" : "", trans_a && trans_b ? " " : "", trans_b ? "trans_b" : "");
}

// ---- linear ----
absl::Status LinearOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_f32(in, has_bias ? 3 : 2));
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  if (x.empty() || w.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("x is ", shape_str(x), " and weight ", shape_str(w),
                                                   ": expected x (..., IN) and weight (OUT, IN)"));
  }
  if (x.back() != w[1]) {
    return absl::InvalidArgumentError(absl::StrCat("x has ", x.back(), " features, weight ", shape_str(w), " takes ", w[1],
                                                   ": expected x (..., ", w[1], ")"));
  }
  if (has_bias && in[2].shape != Shape{w[0]}) {
    return absl::InvalidArgumentError(absl::StrCat("bias is ", shape_str(in[2].shape), ", expected [", w[0], "] (OUT)"));
  }
  Shape y = x;
  y.back() = w[0];
  out.push_back(TensorDesc{std::move(y), DType::kF32});
  return absl::OkStatus();
}

OpCost LinearOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  return gemm_cost(in, out, 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(in[1].shape[1]));
}

absl::StatusOr<TensorList> LinearOp::backward(const BackwardArgs& g) const {
  const Tensor& dy = g.grad_outputs[0];
  TensorList grads(g.input_descs.size());
  if (!dy.defined()) return grads;
  const Tensor& x = g.inputs[0];
  const Tensor& w = g.inputs[1];
  const Shape& xs = g.input_descs[0].shape;
  if (g.needs_input_grad[0]) {
    // dx = dy w: w is 2-D, so every leading index of dy is folded into one GEMM.
    grads[0] = xs.size() >= 2 ? call1(std::make_shared<MatmulOp>(), {dy, w})
                              : reshape(call1(std::make_shared<MatmulOp>(), {reshape(dy, {1, -1}), w}), xs);
  }
  const bool need_bias = has_bias && !bias_ignored && g.needs_input_grad[2];
  // An ignored bias (DTP: added on rank 0 only) gets zeros, not no gradient: every rank
  // must pass the same gradients back, so that a collective its bias came from (a P2
  // gather) runs its backward on every rank.
  if (has_bias && bias_ignored && g.needs_input_grad[2]) grads[2] = zeros(g.input_descs[2].shape);
  if (g.needs_input_grad[1]) {
    TensorList dw = call(std::make_shared<LinearBackwardWeightOp>(need_bias), {x, dy});
    grads[1] = dw[0];
    if (need_bias) grads[2] = dw[1];
  } else if (need_bias) {
    grads[2] = sum_to(dy, g.input_descs[2].shape);
  }
  return grads;
}

absl::Status LinearBackwardWeightOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_f32(in, 2));
  const Shape& x = in[0].shape;
  const Shape& dy = in[1].shape;
  if (x.empty() || dy.size() != x.size() || !std::equal(x.begin(), x.end() - 1, dy.begin())) {
    return absl::InvalidArgumentError(absl::StrCat("x ", shape_str(x), " and dy ", shape_str(dy),
                                                   ": expected (..., IN) and (..., OUT) with the same leading dims"));
  }
  out.push_back(TensorDesc{Shape{dy.back(), x.back()}, DType::kF32});
  if (with_bias) out.push_back(TensorDesc{Shape{dy.back()}, DType::kF32});
  return absl::OkStatus();
}

OpCost LinearBackwardWeightOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  return gemm_cost(in, out, 2.0 * static_cast<double>(linear_rows(in[0])) * static_cast<double>(out[0].numel()));
}

// ---- DTP tables ----
void MatmulOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  out.push_back(all_r(2, 1));
  std::vector<TensorDesc> y;
  if (in.size() != 2 || !infer(in, y).ok()) return;
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  const Shape& ys = y[0].shape;
  const int na = static_cast<int>(a.size()), nb = static_cast<int>(b.size()), ny = static_cast<int>(ys.size());
  const bool weight = nb == 2;
  const int am = trans_a ? na - 1 : na - 2, ak = trans_a ? na - 2 : na - 1;
  const int bk = trans_b ? nb - 1 : nb - 2, bn = trans_b ? nb - 2 : nb - 1;
  // Batch dims, right-aligned: a split on every operand that has the dim unbroadcast.
  for (int d = 0; d < ny - 2; ++d) {
    if (!can_split(ys, d, parts)) continue;
    const int ia = d - (ny - na), ib = d - (ny - nb);
    const bool ha = ia >= 0 && a[ia] == ys[d], hb = ib >= 0 && b[ib] == ys[d];
    out.push_back(sig({ha ? Placement::S(ia) : Placement::R(), hb ? Placement::S(ib) : Placement::R()},
                      {Placement::S(d)}, weight ? Mode::kP1 : Mode::kNone));
  }
  if (can_split(a, am, parts)) {
    out.push_back(sig({Placement::S(am), Placement::R()}, {Placement::S(ny - 2)}, weight ? Mode::kP1 : Mode::kNone));
  }
  if (can_split(b, bn, parts)) {
    out.push_back(sig({Placement::R(), Placement::S(bn)}, {Placement::S(ny - 1)}, weight ? Mode::kP4 : Mode::kNone));
  }
  if (can_split(a, ak, parts)) {
    out.push_back(sig({Placement::S(ak), Placement::S(bk)}, {Placement::P()}, weight ? Mode::kP3 : Mode::kNone));
  }
  out.push_back(sig({Placement::P(), Placement::R()}, {Placement::P()}));
  out.push_back(sig({Placement::R(), Placement::P()}, {Placement::P()}));
}

void LinearOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  const size_t n = has_bias ? 3 : 2;
  out.push_back(all_r(n, 1));
  if (in.size() != n || in[0].shape.empty() || in[1].shape.size() != 2) return;
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  const int last = static_cast<int>(x.size()) - 1;
  auto with = [&](Placement px, Placement pw, Placement pb, Placement py, Mode m) {
    Signature s = sig({px, pw}, {py}, m);
    if (has_bias) s.in.push_back(pb);
    out.push_back(std::move(s));
  };
  for (int d = 0; d < last; ++d) {
    if (can_split(x, d, parts)) with(Placement::S(d), Placement::R(), Placement::R(), Placement::S(d), Mode::kP1);
  }
  if (can_split(x, last, parts)) with(Placement::S(last), Placement::S(1), Placement::R(), Placement::P(), Mode::kP3);
  if (can_split(w, 0, parts)) with(Placement::R(), Placement::S(0), Placement::S(0), Placement::S(last), Mode::kP4);
  with(Placement::P(), Placement::R(), Placement::R(), Placement::P(), Mode::kNone);
}

std::shared_ptr<const OpDef> LinearOp::shard_op(const partition::Signature& s, std::span<const TensorDesc>,
                                                const ShardContext& g) const {
  // A partial output holds the bias once: on rank 0.
  if (has_bias && !s.out.empty() && s.out[0].partial() && g.index != 0) return std::make_shared<LinearOp>(true, true);
  return nullptr;
}

// ---- API ----
Tensor matmul(const Tensor& a, const Tensor& b) { return call1(std::make_shared<MatmulOp>(), {a, b}); }

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (bias.defined()) return call1(std::make_shared<LinearOp>(true), {x, w, bias});
  return call1(std::make_shared<LinearOp>(false), {x, w});
}

}  // namespace mtc
