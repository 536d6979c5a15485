// reshape and flatten: shape rule, backward (reshape back) and API.
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
