// reshape and flatten: shape rule, backward (reshape back) and API; copy_ (in place).
#include "ops/reshape.h"

#include "absl/strings/str_cat.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc {

absl::Status ReshapeOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  if (in.size() != 1) return absl::InvalidArgumentError("expected 1 input");
  Shape s = shape;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer_at >= 0) return absl::InvalidArgumentError(absl::StrCat("shape ", shape_str(shape), " has more than one -1"));
      infer_at = static_cast<int>(i);
    } else if (s[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", shape_str(shape), " has a negative dimension"));
    } else {
      known *= s[i];
    }
  }
  const int64_t n = in[0].numel();
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0) return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", n, " elements into ", shape_str(shape)));
    s[infer_at] = n / known;
  }
  if (numel(s) != n) return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", n, " elements into ", shape_str(shape)));
  out.push_back(TensorDesc{std::move(s), in[0].dtype});
  return absl::OkStatus();
}

absl::StatusOr<TensorList> ReshapeOp::backward(const BackwardArgs& a) const {
  if (!a.grad_outputs[0].defined()) return TensorList(1);
  return TensorList{reshape(a.grad_outputs[0], a.input_descs[0].shape)};
}

std::string ReshapeOp::attrs() const { return absl::StrCat("shape=", shape_str(shape)); }

// ---- DTP table ----
namespace {
// split_maps: whether input dim d of x, split over parts ranks, is output dim e of y split
// the standard way on every rank (parts == 0: on every group size).
bool split_maps(const Shape& x, int d, const Shape& y, int e, int parts) {
  int64_t outer_x = 1, inner_x = 1, outer_y = 1, inner_y = 1;
  for (int i = 0; i < d; ++i) outer_x *= x[i];
  for (size_t i = d + 1; i < x.size(); ++i) inner_x *= x[i];
  for (int i = 0; i < e; ++i) outer_y *= y[i];
  for (size_t i = e + 1; i < y.size(); ++i) inner_y *= y[i];
  if (outer_x != outer_y) return false;
  if (parts == 0) return inner_x == inner_y && x[d] == y[e];
  for (int r = 0; r < parts; ++r) {
    const partition::Range a = partition::shard_range(x[d], parts, r), b = partition::shard_range(y[e], parts, r);
    if (a.offset * inner_x != b.offset * inner_y || a.size * inner_x != b.size * inner_y) return false;
  }
  return true;
}
}  // namespace

void ReshapeOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  out.push_back(all_r(in.size(), 1));
  std::vector<TensorDesc> y;
  if (in.size() != 1 || !infer(in, y).ok()) return;
  const Shape& x = in[0].shape;
  const Shape& ys = y[0].shape;
  for (int d = 0; d < static_cast<int>(x.size()); ++d) {
    if (!can_split(x, d, parts)) continue;
    for (int e = 0; e < static_cast<int>(ys.size()); ++e) {
      if (!can_split(ys, e, parts) || !split_maps(x, d, ys, e, parts)) continue;
      out.push_back(sig({Placement::S(d)}, {Placement::S(e)}));
      break;
    }
  }
  out.push_back(sig({Placement::P()}, {Placement::P()}));
}

std::shared_ptr<const OpDef> ReshapeOp::shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                                 const ShardContext& g) const {
  if (s.out.empty() || !s.out[0].split()) return nullptr;
  std::vector<TensorDesc> y;
  if (!infer(in, y).ok()) return nullptr;
  Shape local = y[0].shape;
  local[s.out[0].dim] = sbp::local_dim(local[s.out[0].dim], g);
  return std::make_shared<ReshapeOp>(std::move(local));
}

absl::Status CopyInPlaceOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  if (in.size() != 2 || in[0] != in[1]) {
    return absl::InvalidArgumentError(absl::StrCat("copy_: expected two tensors of one shape and dtype, got ",
                                                   in.size() == 2 ? in[0].str() + " and " + in[1].str()
                                                                  : absl::StrCat(in.size(), " inputs")));
  }
  out.clear();
  return absl::OkStatus();
}

void copy_(const Tensor& dst, const Tensor& src) {
  NoGradGuard no_grad;
  call(std::make_shared<CopyInPlaceOp>(), {dst, src});
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  if (x.defined() && !x.poisoned() && x.shape() == shape) return x;
  return call1(std::make_shared<ReshapeOp>(shape), {x});
}

Tensor flatten(const Tensor& x, int start_dim) {
  if (!x.defined()) return reshape(x, {-1});
  const int n = x.ndim();
  const int s = start_dim < 0 ? start_dim + n : start_dim;
  Shape out;
  for (int i = 0; i < std::min(s, n); ++i) out.push_back(x.shape()[i]);
  out.push_back(-1);
  return reshape(x, out);
}

}  // namespace mtc
