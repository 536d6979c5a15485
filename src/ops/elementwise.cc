// Shape rules, backward rules and API functions of the elementwise ops.
#include "ops/elementwise.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"
#include "mtc/status.h"

namespace mtc {

absl::StatusOr<Shape> broadcast_shape(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", shape_str(a), " and ", shape_str(b),
                                                     " do not broadcast (dim ", i, ": ", da, " vs ", db, ")"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

static absl::Status expect_inputs(std::span<const TensorDesc> in, size_t n) {
  if (in.size() != n) return absl::InvalidArgumentError(absl::StrCat("expected ", n, " inputs, got ", in.size()));
  return absl::OkStatus();
}
static absl::Status expect_f32(std::span<const TensorDesc> in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype != DType::kF32) return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", in[i].str(), ", expected f32"));
  }
  return absl::OkStatus();
}

// ---- fill ----
absl::Status FillOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 0));
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension in ", shape_str(shape)));
  }
  out.push_back(TensorDesc{shape, dtype});
  return absl::OkStatus();
}
std::string FillOp::attrs() const { return absl::StrFormat("shape=%s value=%g", shape_str(shape), value); }

// ---- binary ----
OpSchema& BinaryOp::add_schema() { static OpSchema s("add"); return s; }
OpSchema& BinaryOp::sub_schema() { static OpSchema s("sub"); return s; }
OpSchema& BinaryOp::mul_schema() { static OpSchema s("mul"); return s; }
const OpSchema& BinaryOp::schema() const {
  return kind == BinaryKind::kAdd ? add_schema() : kind == BinaryKind::kSub ? sub_schema() : mul_schema();
}
absl::Status BinaryOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 2));
  MTC_RETURN_IF_ERROR(expect_f32(in));
  MTC_ASSIGN_OR_RETURN(Shape s, broadcast_shape(in[0].shape, in[1].shape));
  out.push_back(TensorDesc{std::move(s), DType::kF32});
  return absl::OkStatus();
}
absl::StatusOr<TensorList> BinaryOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  TensorList g(2);
  if (!dy.defined()) return g;
  for (int i = 0; i < 2; ++i) {
    if (!a.needs_input_grad[i]) continue;
    Tensor gi = dy;
    if (kind == BinaryKind::kMul) gi = mul(dy, a.inputs[1 - i]);
    if (kind == BinaryKind::kSub && i == 1) gi = scale(gi, -1.0f);
    g[i] = sum_to(gi, a.input_descs[i].shape);
  }
  return g;
}

// ---- scale ----
absl::Status ScaleOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 1));
  MTC_RETURN_IF_ERROR(expect_f32(in));
  out.push_back(in[0]);
  return absl::OkStatus();
}
absl::StatusOr<TensorList> ScaleOp::backward(const BackwardArgs& a) const {
  return TensorList{a.grad_outputs[0].defined() ? scale(a.grad_outputs[0], s) : Tensor()};
}
std::string ScaleOp::attrs() const { return absl::StrFormat("s=%g", s); }

// ---- activations ----
OpSchema& ActOp::relu_schema() { static OpSchema s("relu"); return s; }
OpSchema& ActOp::swish_schema() { static OpSchema s("swish"); return s; }
OpSchema& ActOp::gelu_schema() { static OpSchema s("gelu"); return s; }
OpSchema& ActOp::sigmoid_schema() { static OpSchema s("sigmoid"); return s; }
OpSchema& ActOp::tanh_schema() { static OpSchema s("tanh"); return s; }
const OpSchema& ActOp::schema() const {
  switch (kind) {
    case ActKind::kRelu: return relu_schema();
    case ActKind::kSwish: return swish_schema();
    case ActKind::kGelu: return gelu_schema();
    case ActKind::kSigmoid: return sigmoid_schema();
    case ActKind::kTanh: return tanh_schema();
  }
  return relu_schema();
}
absl::Status ActOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 1));
  MTC_RETURN_IF_ERROR(expect_f32(in));
  out.push_back(in[0]);
  return absl::OkStatus();
}
absl::StatusOr<TensorList> ActOp::backward(const BackwardArgs& a) const {
  if (!a.grad_outputs[0].defined()) return TensorList(1);
  const Tensor& saved = saves_output(kind) ? a.outputs[0] : a.inputs[0];
  return TensorList{call1(std::make_shared<ActGradOp>(kind), {saved, a.grad_outputs[0]})};
}
OpSchema& ActGradOp::relu_grad_schema() { static OpSchema s("relu_grad"); return s; }
OpSchema& ActGradOp::swish_grad_schema() { static OpSchema s("swish_grad"); return s; }
OpSchema& ActGradOp::gelu_grad_schema() { static OpSchema s("gelu_grad"); return s; }
OpSchema& ActGradOp::sigmoid_grad_schema() { static OpSchema s("sigmoid_grad"); return s; }
OpSchema& ActGradOp::tanh_grad_schema() { static OpSchema s("tanh_grad"); return s; }
const OpSchema& ActGradOp::schema() const {
  switch (kind) {
    case ActKind::kRelu: return relu_grad_schema();
    case ActKind::kSwish: return swish_grad_schema();
    case ActKind::kGelu: return gelu_grad_schema();
    case ActKind::kSigmoid: return sigmoid_grad_schema();
    case ActKind::kTanh: return tanh_grad_schema();
  }
  return relu_grad_schema();
}
absl::Status ActGradOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 2));
  MTC_RETURN_IF_ERROR(expect_f32(in));
  if (in[0].shape != in[1].shape) return absl::InvalidArgumentError("saved tensor and gradient differ in shape");
  out.push_back(in[0]);
  return absl::OkStatus();
}

// ---- expand ----
absl::Status ExpandOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 1));
  MTC_ASSIGN_OR_RETURN(Shape s, broadcast_shape(in[0].shape, shape));
  if (s != shape) return absl::InvalidArgumentError(absl::StrCat("cannot expand to ", shape_str(shape)));
  out.push_back(TensorDesc{shape, in[0].dtype});
  return absl::OkStatus();
}
absl::StatusOr<TensorList> ExpandOp::backward(const BackwardArgs& a) const {
  if (!a.grad_outputs[0].defined()) return TensorList(1);
  return TensorList{sum_to(a.grad_outputs[0], a.input_descs[0].shape)};
}
std::string ExpandOp::attrs() const { return absl::StrCat("shape=", shape_str(shape)); }

// ---- DTP tables ----
namespace {
int builder_parts(int parts) { return parts < 2 ? 2 : parts; }
}  // namespace

void BinaryOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  std::vector<TensorDesc> y;
  if (in.size() != 2 || !infer(in, y).ok()) {
    out.push_back(sbp::all_r(in.size(), 1));
    return;
  }
  const bool linear_sum = kind != BinaryKind::kMul;
  partition::elementwise_signatures(in, y[0].shape, builder_parts(parts), out, linear_sum ? -1 : 0, linear_sum);
  if (!linear_sum) out.push_back(sbp::sig({partition::Placement::R(), partition::Placement::P()}, {partition::Placement::P()}));
}

void ScaleOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  if (in.size() != 1) return out.push_back(sbp::all_r(in.size(), 1));
  partition::elementwise_signatures(in, in[0].shape, builder_parts(parts), out, 0);
}

void ActOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  if (in.size() != 1) return out.push_back(sbp::all_r(in.size(), 1));
  partition::elementwise_signatures(in, in[0].shape, builder_parts(parts), out);
}

void ExpandOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  std::vector<TensorDesc> y;
  if (in.size() != 1 || !infer(in, y).ok()) return out.push_back(sbp::all_r(in.size(), 1));
  partition::elementwise_signatures(in, shape, builder_parts(parts), out, 0);
}

std::shared_ptr<const OpDef> ExpandOp::shard_op(const partition::Signature& s, std::span<const TensorDesc>,
                                                const ShardContext& g) const {
  if (s.out.empty() || !s.out[0].split()) return nullptr;
  Shape local = shape;
  local[s.out[0].dim] = sbp::local_dim(shape[s.out[0].dim], g);
  return std::make_shared<ExpandOp>(std::move(local));
}

// ---- API ----
Tensor from_vector(const Shape& shape, std::span<const float> values, bool persistent) {
  Interpreter& in = Runtime::current().interpreter();
  TensorDesc d{shape, DType::kF32};
  if (static_cast<int64_t>(values.size()) != d.numel()) {
    in.record_error(absl::InvalidArgumentError(absl::StrCat(
        "from_vector: ", values.size(), " values for shape ", shape_str(shape), " (", d.numel(), " elements)")));
    return in.apply(std::make_shared<FillOp>(Shape{-1}, 0.f), {})[0];
  }
  return in.put(d, values.data(), persistent);
}
Tensor from_vector_i32(const Shape& shape, std::span<const int32_t> values) {
  Interpreter& in = Runtime::current().interpreter();
  TensorDesc d{shape, DType::kI32};
  if (static_cast<int64_t>(values.size()) != d.numel()) {
    in.record_error(absl::InvalidArgumentError(absl::StrCat(
        "from_vector_i32: ", values.size(), " values for shape ", shape_str(shape), " (", d.numel(), " elements)")));
    return in.apply(std::make_shared<FillOp>(Shape{-1}, 0.f), {})[0];
  }
  return in.put(d, values.data());
}
Tensor full(const Shape& shape, float value) { return call1(std::make_shared<FillOp>(shape, value), {}); }
Tensor zeros(const Shape& shape) { return full(shape, 0.f); }
Tensor ones(const Shape& shape) { return full(shape, 1.f); }
Tensor add(const Tensor& a, const Tensor& b) { return call1(std::make_shared<BinaryOp>(BinaryKind::kAdd), {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return call1(std::make_shared<BinaryOp>(BinaryKind::kSub), {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return call1(std::make_shared<BinaryOp>(BinaryKind::kMul), {a, b}); }
Tensor scale(const Tensor& x, float s) { return call1(std::make_shared<ScaleOp>(s), {x}); }
Tensor relu(const Tensor& x) { return call1(std::make_shared<ActOp>(ActKind::kRelu), {x}); }
Tensor swish(const Tensor& x) { return call1(std::make_shared<ActOp>(ActKind::kSwish), {x}); }
Tensor sigmoid(const Tensor& x) { return call1(std::make_shared<ActOp>(ActKind::kSigmoid), {x}); }
Tensor tanh(const Tensor& x) { return call1(std::make_shared<ActOp>(ActKind::kTanh), {x}); }
Tensor gelu(const Tensor& x) { return call1(std::make_shared<ActOp>(ActKind::kGelu), {x}); }
Tensor expand(const Tensor& x, const Shape& shape) {
  if (x.defined() && x.shape() == shape) return x;
  return call1(std::make_shared<ExpandOp>(shape), {x});
}

}  // namespace mtc
