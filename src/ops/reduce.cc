// Shape rules, backward rules and API functions of sum, mean and sum_to.
#include "ops/reduce.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/status.h"
#include "ops/elementwise.h"

namespace mtc {

absl::Status ReduceSumOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  if (in.size() != 1) return absl::InvalidArgumentError("expected 1 input");
  if (in[0].dtype != DType::kF32) return absl::InvalidArgumentError("expected f32");
  if (reduce.size() != in[0].shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat("reduction mask has ", reduce.size(), " dims, input has ", in[0].shape.size()));
  }
  int64_t kept = 1;
  for (size_t i = 0; i < reduce.size(); ++i) kept *= reduce[i] ? 1 : in[0].shape[i];
  if (kept != numel(out_shape)) return absl::InvalidArgumentError(absl::StrCat("output shape ", shape_str(out_shape), " does not hold the kept dims"));
  out.push_back(TensorDesc{out_shape, DType::kF32});
  return absl::OkStatus();
}

absl::StatusOr<TensorList> ReduceSumOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return TensorList(1);
  // Put dy back in keepdim form, then broadcast it over the reduced dims.
  const Shape& xs = a.input_descs[0].shape;
  Shape keep(xs);
  for (size_t i = 0; i < keep.size(); ++i) if (reduce[i]) keep[i] = 1;
  Tensor g = reshape(dy, keep);
  if (scale != 1.0f) g = mtc::scale(g, scale);
  return TensorList{expand(g, xs)};
}

ReduceSumOp::Runs ReduceSumOp::runs(const Shape& x) const {
  Runs r;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == 1) continue;  // changes nothing
    if (!r.reduced.empty() && r.reduced.back() == reduce[i]) {
      r.sizes.back() *= x[i];
    } else {
      r.sizes.push_back(x[i]);
      r.reduced.push_back(reduce[i]);
    }
  }
  return r;
}

std::string ReduceSumOp::attrs() const {
  std::vector<int> dims;
  for (size_t i = 0; i < reduce.size(); ++i) if (reduce[i]) dims.push_back(static_cast<int>(i));
  return absl::StrFormat("dims=[%s] out=%s scale=%g", absl::StrJoin(dims, ","), shape_str(out_shape), scale);
}

// ---- DTP table ----
int ReduceSumOp::out_dim(const Shape& x, int d) const {
  if (d < 0 || d >= static_cast<int>(x.size()) || reduce[d] || x[d] < 2) return -1;
  // The kept dims of more than one element and the output dims of more than one element,
  // in order: where they match one to one, each kept dim is an output dim.
  std::vector<int> kept, outs;
  for (size_t i = 0; i < x.size(); ++i) if (!reduce[i] && x[i] > 1) kept.push_back(static_cast<int>(i));
  for (size_t j = 0; j < out_shape.size(); ++j) if (out_shape[j] > 1) outs.push_back(static_cast<int>(j));
  if (kept.size() != outs.size()) return -1;
  int found = -1;
  for (size_t k = 0; k < kept.size(); ++k) {
    if (x[kept[k]] != out_shape[outs[k]]) return -1;
    if (kept[k] == d) found = outs[k];
  }
  return found;
}

void ReduceSumOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  out.push_back(all_r(in.size(), 1));
  std::vector<TensorDesc> y;
  if (in.size() != 1 || !infer(in, y).ok()) return;
  const Shape& x = in[0].shape;
  for (int d = 0; d < static_cast<int>(x.size()); ++d) {
    if (!can_split(x, d, parts)) continue;
    if (reduce[d]) {
      out.push_back(sig({Placement::S(d)}, {Placement::P()}));
    } else if (const int e = out_dim(x, d); e >= 0) {
      out.push_back(sig({Placement::S(d)}, {Placement::S(e)}));
    }
  }
  out.push_back(sig({Placement::P()}, {Placement::P()}));
}

std::shared_ptr<const OpDef> ReduceSumOp::shard_op(const partition::Signature& s, std::span<const TensorDesc>,
                                                   const ShardContext& g) const {
  if (s.out.empty() || !s.out[0].split()) return nullptr;
  Shape local = out_shape;
  local[s.out[0].dim] = sbp::local_dim(out_shape[s.out[0].dim], g);
  return std::make_shared<ReduceSumOp>(reduce, std::move(local), scale);
}

namespace {
Tensor reduce_dims(const Tensor& x, std::vector<int> dims, bool keepdim, bool average) {
  if (!x.defined()) return sum_to(x, {});
  const int n = x.ndim();
  std::vector<bool> mask(n, false);
  for (int d : dims) {
    const int k = d < 0 ? d + n : d;
    if (k < 0 || k >= n) {
      // Let infer report it: an out-of-range dim makes the mask the wrong length.
      return call1(std::make_shared<ReduceSumOp>(std::vector<bool>(n + 1), Shape{}, 1.f), {x});
    }
    mask[k] = true;
  }
  Shape out;
  int64_t count = 1;
  for (int i = 0; i < n; ++i) {
    if (mask[i]) {
      count *= x.shape()[i];
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(x.shape()[i]);
    }
  }
  const float s = average ? 1.0f / static_cast<float>(std::max<int64_t>(count, 1)) : 1.0f;
  return call1(std::make_shared<ReduceSumOp>(std::move(mask), std::move(out), s), {x});
}
std::vector<int> all_dims(const Tensor& x) {
  std::vector<int> d(x.defined() ? x.ndim() : 0);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<int>(i);
  return d;
}
}  // namespace

Tensor sum(const Tensor& x) { return reduce_dims(x, all_dims(x), false, false); }
Tensor sum(const Tensor& x, std::vector<int> dims, bool keepdim) { return reduce_dims(x, std::move(dims), keepdim, false); }
Tensor mean(const Tensor& x) { return reduce_dims(x, all_dims(x), false, true); }
Tensor mean(const Tensor& x, std::vector<int> dims, bool keepdim) { return reduce_dims(x, std::move(dims), keepdim, true); }

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.defined() && x.shape() == shape) return x;
  const Shape xs = x.defined() ? x.shape() : Shape{};
  std::vector<bool> mask(xs.size(), false);
  const size_t lead = xs.size() >= shape.size() ? xs.size() - shape.size() : 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    mask[i] = i < lead || (shape[i - lead] == 1 && xs[i] != 1);
  }
  return call1(std::make_shared<ReduceSumOp>(std::move(mask), shape, 1.f), {x});
}

}  // namespace mtc
