// Shape rules, backward rules and API functions of the pooling ops.
#include "ops/pool.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autograd.h"
#include "mtc/status.h"
#include "ops/conv.h"
#include "ops/elementwise.h"

namespace mtc {
namespace {

absl::Status expect_image(std::span<const TensorDesc> in, size_t n) {
  if (in.size() != n) return absl::InvalidArgumentError(absl::StrCat("expected ", n, " inputs, got ", in.size()));
  for (size_t i = 0; i < n; ++i) {
    if (in[i].dtype != DType::kF32 || in[i].shape.size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", in[i].str(), ", expected f32 (N, C, H, W)"));
    }
  }
  return absl::OkStatus();
}

// pool_output_shape: (N, C, OH, OW) for x under o, or what is wrong with o.
absl::StatusOr<Shape> pool_output_shape(const Pool2dOptions& o, const Shape& x) {
  if (o.kernel_h < 1 || o.kernel_w < 1 || o.stride_h < 1 || o.stride_w < 1 || o.pad_h < 0 || o.pad_w < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("kernel %dx%d and stride (%d,%d) must be >= 1, padding (%d,%d) >= 0",
                                                      o.kernel_h, o.kernel_w, o.stride_h, o.stride_w, o.pad_h, o.pad_w));
  }
  if (2 * o.pad_h > o.kernel_h || 2 * o.pad_w > o.kernel_w) {
    return absl::InvalidArgumentError(absl::StrFormat("padding (%d,%d) must be at most half the kernel %dx%d", o.pad_h,
                                                      o.pad_w, o.kernel_h, o.kernel_w));
  }
  const int64_t oh = conv_out_size(x[2], o.kernel_h, o.stride_h, o.pad_h, 1);
  const int64_t ow = conv_out_size(x[3], o.kernel_w, o.stride_w, o.pad_w, 1);
  if (oh < 1 || ow < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("kernel %dx%d does not fit the input %dx%d padded by (%d,%d)",
                                                      o.kernel_h, o.kernel_w, x[2], x[3], o.pad_h, o.pad_w));
  }
  return Shape{x[0], x[1], oh, ow};
}

std::string pool_attrs(const Pool2dOptions& o) {
  return absl::StrFormat("kernel=%d,%d stride=%d,%d padding=%d,%d", o.kernel_h, o.kernel_w, o.stride_h, o.stride_w,
                         o.pad_h, o.pad_w);
}

// infer_pool: one input x -> the pooled shape.
absl::Status infer_pool(const Pool2dOptions& o, std::span<const TensorDesc> in, std::vector<TensorDesc>& out) {
  MTC_RETURN_IF_ERROR(expect_image(in, 1));
  MTC_ASSIGN_OR_RETURN(Shape y, pool_output_shape(o, in[0].shape));
  out.push_back(TensorDesc{std::move(y), DType::kF32});
  return absl::OkStatus();
}

// expect_pool_grad: dy has the pooled shape of x_shape.
absl::Status expect_pool_grad(const Pool2dOptions& o, const Shape& x_shape, const TensorDesc& dy) {
  MTC_ASSIGN_OR_RETURN(Shape y, pool_output_shape(o, x_shape));
  if (dy.shape != y) {
    return absl::InvalidArgumentError(absl::StrCat("dy is ", dy.str(), ", expected ", shape_str(y), " for input ",
                                                   shape_str(x_shape)));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- max ----
absl::Status MaxPool2dOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  return infer_pool(o, in, out);
}
absl::StatusOr<TensorList> MaxPool2dOp::backward(const BackwardArgs& a) const {
  if (!a.grad_outputs[0].defined()) return TensorList(1);
  return TensorList{call1(std::make_shared<MaxPool2dBackwardOp>(o), {a.inputs[0], a.grad_outputs[0]})};
}
std::string MaxPool2dOp::attrs() const { return pool_attrs(o); }

absl::Status MaxPool2dBackwardOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_image(in, 2));
  MTC_RETURN_IF_ERROR(expect_pool_grad(o, in[0].shape, in[1]));
  out.push_back(in[0]);
  return absl::OkStatus();
}
std::string MaxPool2dBackwardOp::attrs() const { return pool_attrs(o); }

// ---- average ----
absl::Status AvgPool2dOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  return infer_pool(o, in, out);
}
absl::StatusOr<TensorList> AvgPool2dOp::backward(const BackwardArgs& a) const {
  if (!a.grad_outputs[0].defined()) return TensorList(1);
  return TensorList{call1(std::make_shared<AvgPool2dBackwardOp>(o, a.input_descs[0].shape), {a.grad_outputs[0]})};
}
std::string AvgPool2dOp::attrs() const { return pool_attrs(o); }

absl::Status AvgPool2dBackwardOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_image(in, 1));
  if (x_shape.size() != 4) return absl::InvalidArgumentError(absl::StrCat("input shape ", shape_str(x_shape), " is not 4-D"));
  MTC_RETURN_IF_ERROR(expect_pool_grad(o, x_shape, in[0]));
  out.push_back(TensorDesc{x_shape, DType::kF32});
  return absl::OkStatus();
}
std::string AvgPool2dBackwardOp::attrs() const { return absl::StrCat(pool_attrs(o), " x=", shape_str(x_shape)); }

// ---- global average ----
absl::Status GlobalAvgPoolOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_image(in, 1));
  out.push_back(TensorDesc{Shape{in[0].shape[0], in[0].shape[1]}, DType::kF32});
  return absl::OkStatus();
}
absl::StatusOr<TensorList> GlobalAvgPoolOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return TensorList(1);
  const Shape& xs = a.input_descs[0].shape;
  const float inv = 1.0f / static_cast<float>(std::max<int64_t>(xs[2] * xs[3], 1));
  return TensorList{expand(reshape(scale(dy, inv), {xs[0], xs[1], 1, 1}), xs)};
}

// ---- DTP tables ----
namespace {
// pool_signatures: R; S(0) and S(1) (N and C) kept; P kept when the pool is linear.
void pool_signatures(const OpDef& op, std::span<const TensorDesc> in, int parts, bool linear,
                     partition::SignatureList& out) {
  using namespace sbp;
  out.push_back(all_r(in.size(), 1));
  std::vector<TensorDesc> y;
  if (in.size() != 1 || !op.infer(in, y).ok()) return;
  for (int d : {0, 1}) {
    if (can_split(in[0].shape, d, parts)) out.push_back(sig({Placement::S(d)}, {Placement::S(d)}));
  }
  if (linear) out.push_back(sig({Placement::P()}, {Placement::P()}));
}
}  // namespace

void MaxPool2dOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  pool_signatures(*this, in, parts, false, out);
}
void AvgPool2dOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  pool_signatures(*this, in, parts, true, out);
}
void GlobalAvgPoolOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  pool_signatures(*this, in, parts, true, out);
}

// ---- API ----
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) { return call1(std::make_shared<MaxPool2dOp>(o), {x}); }
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) { return call1(std::make_shared<AvgPool2dOp>(o), {x}); }
Tensor global_avg_pool(const Tensor& x) { return call1(std::make_shared<GlobalAvgPoolOp>(), {x}); }

}  // namespace mtc
