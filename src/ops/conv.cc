// Shape rules, cost estimates, backward rules and the API function of conv2d.
#include "ops/conv.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc {
namespace {

absl::Status expect_f32(std::span<const TensorDesc> in, size_t n_min, size_t n_max) {
  if (in.size() < n_min || in.size() > n_max) {
    return absl::InvalidArgumentError(n_min == n_max ? absl::StrCat("expected ", n_min, " inputs, got ", in.size())
                                                     : absl::StrCat("expected ", n_min, " to ", n_max, " inputs, got ", in.size()));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype != DType::kF32) return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", in[i].str(), ", expected f32"));
  }
  return absl::OkStatus();
}

// conv_output_shape: y's shape for x (N, C, H, W) and w (OC, C/groups, KH, KW) under o, or
// InvalidArgument saying which rule was broken and what was expected.
absl::StatusOr<Shape> conv_output_shape(const Conv2dOptions& o, const Shape& x, const Shape& w) {
  if (o.stride_h < 1 || o.stride_w < 1 || o.dilation_h < 1 || o.dilation_w < 1 || o.pad_h < 0 || o.pad_w < 0 || o.groups < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stride (%d,%d) and dilation (%d,%d) must be >= 1, padding (%d,%d) >= 0, groups %d >= 1", o.stride_h, o.stride_w,
        o.dilation_h, o.dilation_w, o.pad_h, o.pad_w, o.groups));
  }
  if (x.size() != 4) return absl::InvalidArgumentError(absl::StrCat("x is ", shape_str(x), ", expected 4-D (N, C, H, W)"));
  if (w.size() != 4) return absl::InvalidArgumentError(absl::StrCat("weight is ", shape_str(w), ", expected 4-D (OC, C/groups, KH, KW)"));
  const int64_t c = x[1], oc = w[0], g = o.groups;
  if (c % g != 0 || oc % g != 0) {
    return absl::InvalidArgumentError(absl::StrCat("groups=", g, " must divide the input channels (", c,
                                                   ") and the output channels (", oc, ")"));
  }
  if (w[1] != c / g) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", shape_str(w), " takes ", w[1], " input channels per group (",
                                                   g, " groups), x has ", c, " channels: expected weight dim 1 = C/groups = ",
                                                   c / g));
  }
  const int64_t oh = conv_out_size(x[2], w[2], o.stride_h, o.pad_h, o.dilation_h);
  const int64_t ow = conv_out_size(x[3], w[3], o.stride_w, o.pad_w, o.dilation_w);
  if (oh < 1 || ow < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kernel %dx%d (dilation %d,%d) does not fit the input %dx%d padded by (%d,%d)", w[2], w[3], o.dilation_h,
        o.dilation_w, x[2], x[3], o.pad_h, o.pad_w));
  }
  return Shape{x[0], oc, oh, ow};
}

// conv_flops: multiply-adds counted as two flops.
double conv_flops(const Shape& y, const Shape& w) {
  return 2.0 * static_cast<double>(numel(y)) * static_cast<double>(w[1] * w[2] * w[3]);
}

OpCost io_cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out, double flops) {
  OpCost c;
  for (const TensorDesc& d : in) c.bytes_read += static_cast<double>(d.bytes());
  for (const TensorDesc& d : out) c.bytes_written += static_cast<double>(d.bytes());
  c.flops = flops;
  return c;
}

std::string conv_attrs(const Conv2dOptions& o) {
  return absl::StrFormat("stride=%d,%d padding=%d,%d dilation=%d,%d groups=%d", o.stride_h, o.stride_w, o.pad_h,
                         o.pad_w, o.dilation_h, o.dilation_w, o.groups);
}

}  // namespace

// ---- forward ----
absl::Status Conv2dOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  const size_t n = has_bias ? 3 : 2;
  MTC_RETURN_IF_ERROR(expect_f32(in, n, n));
  MTC_ASSIGN_OR_RETURN(Shape y, conv_output_shape(o, in[0].shape, in[1].shape));
  if (has_bias && in[2].shape != Shape{y[1]}) {
    return absl::InvalidArgumentError(absl::StrCat("bias is ", shape_str(in[2].shape), ", expected [", y[1], "] (OC)"));
  }
  out.push_back(TensorDesc{std::move(y), DType::kF32});
  return absl::OkStatus();
}

OpCost Conv2dOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  const double bias_flops = has_bias ? static_cast<double>(out[0].numel()) : 0.0;
  return io_cost(in, out, conv_flops(out[0].shape, in[1].shape) + bias_flops);
}

absl::StatusOr<TensorList> Conv2dOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  TensorList g(a.input_descs.size());
  if (!dy.defined()) return g;
  const Tensor& x = a.inputs[0];
  const Tensor& w = a.inputs[1];
  if (a.needs_input_grad[0]) g[0] = call1(std::make_shared<Conv2dBackwardInputOp>(o, a.input_descs[0].shape), {dy, w});
  const bool need_bias = adds_bias() && a.needs_input_grad[2];
  // An ignored bias gets zeros (see LinearOp::backward): every rank passes the same gradients.
  if (has_bias && bias_ignored && a.needs_input_grad[2]) g[2] = zeros(a.input_descs[2].shape);
  if (a.needs_input_grad[1]) {
    TensorList dw = call(std::make_shared<Conv2dBackwardWeightOp>(o, a.input_descs[1].shape, need_bias), {x, dy});
    g[1] = dw[0];
    if (need_bias) g[2] = dw[1];
  } else if (need_bias) {
    g[2] = sum(dy, {0, 2, 3});
  }
  return g;
}

std::string Conv2dOp::attrs() const {
  return conv_attrs(o) + (has_bias ? (bias_ignored ? " bias=ignored" : " bias") : "");
}

void Conv2dOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  const size_t n = has_bias ? 3 : 2;
  out.push_back(all_r(n, 1));
  std::vector<TensorDesc> y;
  if (in.size() != n || !infer(in, y).ok()) return;
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  auto with = [&](Placement px, Placement pw, Placement pb, Placement py, Mode m) {
    Signature s = sig({px, pw}, {py}, m);
    if (has_bias) s.in.push_back(pb);
    out.push_back(std::move(s));
  };
  if (can_split(x, 0, parts)) with(Placement::S(0), Placement::R(), Placement::R(), Placement::S(0), Mode::kP1);
  if (o.groups == 1) {
    if (can_split(x, 1, parts)) with(Placement::S(1), Placement::S(1), Placement::R(), Placement::P(), Mode::kP3);
    if (can_split(w, 0, parts)) with(Placement::R(), Placement::S(0), Placement::S(0), Placement::S(1), Mode::kP4);
  } else if (o.groups == x[1] && w[0] == x[1] && can_split(x, 1, parts)) {
    with(Placement::S(1), Placement::S(0), Placement::S(0), Placement::S(1), Mode::kNone);
  }
}

std::shared_ptr<const OpDef> Conv2dOp::shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                                const ShardContext& g) const {
  if (s.out.empty()) return nullptr;
  // P3: the partial sums hold the bias once, on rank 0.
  if (s.out[0].partial()) return has_bias && g.index != 0 ? std::make_shared<Conv2dOp>(o, true, true) : nullptr;
  // Depthwise on split channels: one group per local channel.
  if (o.groups > 1 && s.in[0].split() && s.in[0].dim == 1 && !in.empty()) {
    Conv2dOptions local = o;
    local.groups = static_cast<int>(sbp::local_dim(in[0].shape[1], g));
    return std::make_shared<Conv2dOp>(local, has_bias, bias_ignored);
  }
  return nullptr;
}

// ---- gradient of the input ----
absl::Status Conv2dBackwardInputOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_f32(in, 2, 2));
  MTC_ASSIGN_OR_RETURN(Shape y, conv_output_shape(o, x_shape, in[1].shape));
  if (in[0].shape != y) {
    return absl::InvalidArgumentError(absl::StrCat("output gradient is ", shape_str(in[0].shape), ", expected ",
                                                   shape_str(y), " for input ", shape_str(x_shape)));
  }
  out.push_back(TensorDesc{x_shape, DType::kF32});
  return absl::OkStatus();
}

OpCost Conv2dBackwardInputOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  return io_cost(in, out, conv_flops(in[0].shape, in[1].shape));
}

std::string Conv2dBackwardInputOp::attrs() const { return absl::StrCat(conv_attrs(o), " x=", shape_str(x_shape)); }

// ---- gradient of the weight (and bias) ----
absl::Status Conv2dBackwardWeightOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_f32(in, 2, 2));
  MTC_ASSIGN_OR_RETURN(Shape y, conv_output_shape(o, in[0].shape, w_shape));
  if (in[1].shape != y) {
    return absl::InvalidArgumentError(absl::StrCat("output gradient is ", shape_str(in[1].shape), ", expected ",
                                                   shape_str(y), " for weight ", shape_str(w_shape)));
  }
  out.push_back(TensorDesc{w_shape, DType::kF32});
  if (with_bias) out.push_back(TensorDesc{Shape{w_shape[0]}, DType::kF32});
  return absl::OkStatus();
}

OpCost Conv2dBackwardWeightOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  const double bias_flops = with_bias ? static_cast<double>(in[1].numel()) : 0.0;
  return io_cost(in, out, conv_flops(in[1].shape, w_shape) + bias_flops);
}

std::string Conv2dBackwardWeightOp::attrs() const {
  return absl::StrCat(conv_attrs(o), " w=", shape_str(w_shape), with_bias ? " bias" : "");
}

// ---- API ----
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& o) {
  if (bias.defined()) return call1(std::make_shared<Conv2dOp>(o, true), {x, w, bias});
  return call1(std::make_shared<Conv2dOp>(o, false), {x, w});
}

}  // namespace mtc
