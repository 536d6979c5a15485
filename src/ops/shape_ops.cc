// Shape rules, backward rules and API functions of permute, transpose, concat, split,
// slice and channel_shuffle, plus the shared dim and input checks.
#include "ops/shape_ops.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc {

absl::StatusOr<int> resolve_dim(int dim, int ndim) {
  const int k = dim < 0 ? dim + ndim : dim;
  if (k < 0 || k >= ndim) {
    if (ndim == 0) {
      return absl::InvalidArgumentError(absl::StrCat("dim ", dim, " given for a 0-d tensor, which has no dims"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " is out of range for ", ndim, " dims (expected ", -ndim, "..", ndim - 1, ")"));
  }
  return k;
}

absl::Status expect_num_inputs(std::span<const TensorDesc> in, size_t n) {
  if (in.size() != n) return absl::InvalidArgumentError(absl::StrCat("expected ", n, " inputs, got ", in.size()));
  return absl::OkStatus();
}

absl::Status expect_dtype(const TensorDesc& d, DType t, const char* what) {
  if (d.dtype != t) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", d.str(), ", expected ", dtype_name(t)));
  }
  return absl::OkStatus();
}

DimSplit split_at_dim(const Shape& s, int dim) {
  MTC_CHECK(dim >= 0 && dim < static_cast<int>(s.size()), "dim ", dim, " for ", shape_str(s));
  DimSplit d;
  for (int i = 0; i < dim; ++i) d.outer *= s[i];
  d.size = s[dim];
  for (size_t i = dim + 1; i < s.size(); ++i) d.inner *= s[i];
  return d;
}

std::pair<int64_t, int64_t> resolve_slice(int64_t size, int64_t start, int64_t end) {
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, 0, size);
  return {start, std::max<int64_t>(0, end - start)};
}

namespace {
// with_dim: `s` with dim `d` set to `v`.
Shape with_dim(Shape s, int d, int64_t v) {
  s[d] = v;
  return s;
}
}  // namespace

// ---- permute / transpose ----
OpSchema& PermuteOp::permute_schema() { static OpSchema s("permute"); return s; }
OpSchema& PermuteOp::transpose_schema() { static OpSchema s("transpose"); return s; }
const OpSchema& PermuteOp::schema() const { return is_transpose ? transpose_schema() : permute_schema(); }

absl::StatusOr<std::vector<int>> PermuteOp::perm(int ndim) const {
  std::vector<int> p(ndim);
  if (is_transpose) {
    MTC_CHECK(dims.size() == 2, "transpose holds ", dims.size(), " dims");
    MTC_ASSIGN_OR_RETURN(const int d0, resolve_dim(dims[0], ndim));
    MTC_ASSIGN_OR_RETURN(const int d1, resolve_dim(dims[1], ndim));
    for (int i = 0; i < ndim; ++i) p[i] = i;
    std::swap(p[d0], p[d1]);
    return p;
  }
  if (static_cast<int>(dims.size()) != ndim) {
    return absl::InvalidArgumentError(
        absl::StrCat("permutation [", absl::StrJoin(dims, ","), "] has ", dims.size(), " dims, input has ", ndim));
  }
  std::vector<bool> seen(ndim, false);
  for (int i = 0; i < ndim; ++i) {
    MTC_ASSIGN_OR_RETURN(p[i], resolve_dim(dims[i], ndim));
    if (seen[p[i]]) {
      return absl::InvalidArgumentError(
          absl::StrCat("[", absl::StrJoin(dims, ","), "] is not a permutation: dim ", p[i], " repeats"));
    }
    seen[p[i]] = true;
  }
  return p;
}

absl::Status PermuteOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 1));
  MTC_ASSIGN_OR_RETURN(std::vector<int> p, perm(static_cast<int>(in[0].shape.size())));
  Shape s(p.size());
  for (size_t i = 0; i < p.size(); ++i) s[i] = in[0].shape[p[i]];
  out.push_back(TensorDesc{std::move(s), in[0].dtype});
  return absl::OkStatus();
}

absl::StatusOr<TensorList> PermuteOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return TensorList(1);
  if (is_transpose) return TensorList{transpose(dy, dims[0], dims[1])};
  MTC_ASSIGN_OR_RETURN(std::vector<int> p, perm(static_cast<int>(a.input_descs[0].shape.size())));
  std::vector<int> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<int>(i);
  return TensorList{permute(dy, std::move(inv))};
}

std::string PermuteOp::attrs() const {
  if (is_transpose) return absl::StrCat("d0=", dims[0], " d1=", dims[1]);
  return absl::StrCat("dims=[", absl::StrJoin(dims, ","), "]");
}

// ---- concat ----
absl::Status ConcatOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  if (in.empty()) return absl::InvalidArgumentError("concat of no tensors");
  const TensorDesc& first = in[0];
  const int nd = static_cast<int>(first.shape.size());
  MTC_ASSIGN_OR_RETURN(const int d, resolve_dim(dim, nd));
  int64_t total = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype != first.dtype || static_cast<int>(in[i].shape.size()) != nd ||
        with_dim(in[i].shape, d, 0) != with_dim(first.shape, d, 0)) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", in[i].str(), ", expected ",
                                                     dtype_name(first.dtype), " matching ", shape_str(first.shape),
                                                     " in every dim but ", d));
    }
    total += in[i].shape[d];
  }
  out.push_back(TensorDesc{with_dim(first.shape, d, total), first.dtype});
  return absl::OkStatus();
}

absl::StatusOr<TensorList> ConcatOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return TensorList(a.input_descs.size());
  const int d = *resolve_dim(dim, static_cast<int>(a.input_descs[0].shape.size()));
  std::vector<int64_t> sizes;
  for (const TensorDesc& t : a.input_descs) sizes.push_back(t.shape[d]);
  if (sizes.size() == 1) return TensorList{dy};
  return split(dy, std::move(sizes), d);
}

std::string ConcatOp::attrs() const { return absl::StrCat("dim=", dim); }

// ---- split ----
absl::Status SplitOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 1));
  MTC_ASSIGN_OR_RETURN(const int d, resolve_dim(dim, static_cast<int>(in[0].shape.size())));
  if (sizes.empty()) return absl::InvalidArgumentError("split into no pieces (sizes is empty)");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) return absl::InvalidArgumentError(absl::StrCat("split size ", s, " is negative"));
    total += s;
  }
  if (total != in[0].shape[d]) {
    return absl::InvalidArgumentError(absl::StrCat("split sizes [", absl::StrJoin(sizes, ","), "] add up to ", total,
                                                   ", expected dim ", d, "'s extent ", in[0].shape[d]));
  }
  for (int64_t s : sizes) out.push_back(TensorDesc{with_dim(in[0].shape, d, s), in[0].dtype});
  return absl::OkStatus();
}

absl::StatusOr<TensorList> SplitOp::backward(const BackwardArgs& a) const {
  bool any = false;
  for (const Tensor& g : a.grad_outputs) any |= g.defined();
  if (!any) return TensorList(1);
  if (a.grad_outputs.size() == 1) return TensorList{a.grad_outputs[0]};
  const int d = *resolve_dim(dim, static_cast<int>(a.input_descs[0].shape.size()));
  TensorList parts;
  for (size_t i = 0; i < a.grad_outputs.size(); ++i) {
    parts.push_back(a.grad_outputs[i].defined() ? a.grad_outputs[i] : zeros(a.output_descs[i].shape));
  }
  return TensorList{concat(parts, d)};
}

std::string SplitOp::attrs() const { return absl::StrCat("sizes=[", absl::StrJoin(sizes, ","), "] dim=", dim); }

// ---- slice ----
absl::Status SliceOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 1));
  MTC_ASSIGN_OR_RETURN(const int d, resolve_dim(dim, static_cast<int>(in[0].shape.size())));
  const int64_t len = resolve_slice(in[0].shape[d], start, end).second;
  out.push_back(TensorDesc{with_dim(in[0].shape, d, len), in[0].dtype});
  return absl::OkStatus();
}

absl::StatusOr<TensorList> SliceOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return TensorList(1);
  const Shape& xs = a.input_descs[0].shape;
  const int d = *resolve_dim(dim, static_cast<int>(xs.size()));
  const int64_t first = resolve_slice(xs[d], start, end).first;
  return TensorList{call1(std::make_shared<SliceBackwardOp>(d, first, xs[d]), {dy})};
}

std::string SliceOp::attrs() const { return absl::StrCat("dim=", dim, " start=", start, " end=", end); }

absl::Status SliceBackwardOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 1));
  MTC_ASSIGN_OR_RETURN(const int d, resolve_dim(dim, static_cast<int>(in[0].shape.size())));
  if (start < 0 || start + in[0].shape[d] > size) {
    return absl::InvalidArgumentError(absl::StrCat("a slice of ", in[0].shape[d], " at ", start,
                                                   " does not fit in ", size, " elements"));
  }
  out.push_back(TensorDesc{with_dim(in[0].shape, d, size), in[0].dtype});
  return absl::OkStatus();
}

absl::StatusOr<TensorList> SliceBackwardOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return TensorList(1);
  const int d = *resolve_dim(dim, static_cast<int>(a.input_descs[0].shape.size()));
  return TensorList{slice(dy, d, start, start + a.input_descs[0].shape[d])};
}

std::string SliceBackwardOp::attrs() const { return absl::StrCat("dim=", dim, " start=", start, " size=", size); }

// ---- channel_shuffle ----
absl::Status ChannelShuffleOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_num_inputs(in, 1));
  const Shape& s = in[0].shape;
  if (s.size() < 2) return absl::InvalidArgumentError("expected (N, C, ...) with at least 2 dims");
  if (groups < 1 || s[1] % groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("groups=", groups, " must be positive and divide the ", s[1], " channels"));
  }
  out.push_back(in[0]);
  return absl::OkStatus();
}

absl::StatusOr<TensorList> ChannelShuffleOp::backward(const BackwardArgs& a) const {
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return TensorList(1);
  return TensorList{channel_shuffle(dy, static_cast<int>(a.input_descs[0].shape[1] / groups))};
}

std::string ChannelShuffleOp::attrs() const { return absl::StrCat("groups=", groups); }

// ---- DTP tables ----
namespace {
// splits_off_dim: for one input of shape x (or n inputs agreeing off `dim`): all R -> R
// (n_out outputs), S(d) on every input -> S(d) on every output for each d != dim, all P
// -> all P.
void splits_off_dim(const Shape& x, int dim, size_t n_in, size_t n_out, int parts, partition::SignatureList& out) {
  using namespace sbp;
  out.push_back(all_r(n_in, n_out));
  for (int d = 0; d < static_cast<int>(x.size()); ++d) {
    if (d != dim && can_split(x, d, parts)) out.push_back(uniform(n_in, Placement::S(d), n_out, Placement::S(d)));
  }
  out.push_back(uniform(n_in, Placement::P(), n_out, Placement::P()));
}
}  // namespace

void PermuteOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  out.push_back(all_r(in.size(), 1));
  if (in.size() != 1) return;
  const int nd = static_cast<int>(in[0].shape.size());
  absl::StatusOr<std::vector<int>> p = perm(nd);
  if (!p.ok()) return;
  for (int i = 0; i < nd; ++i) {
    const int d = (*p)[i];
    if (can_split(in[0].shape, d, parts)) out.push_back(sig({Placement::S(d)}, {Placement::S(i)}));
  }
  out.push_back(sig({Placement::P()}, {Placement::P()}));
}

void ConcatOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  std::vector<TensorDesc> y;
  if (in.empty() || !infer(in, y).ok()) return out.push_back(sbp::all_r(in.size(), 1));
  splits_off_dim(y[0].shape, *resolve_dim(dim, static_cast<int>(y[0].shape.size())), in.size(), 1, parts, out);
}

void SplitOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  std::vector<TensorDesc> y;
  if (in.size() != 1 || !infer(in, y).ok()) return out.push_back(sbp::all_r(in.size(), sizes.size()));
  splits_off_dim(in[0].shape, *resolve_dim(dim, static_cast<int>(in[0].shape.size())), 1, sizes.size(), parts, out);
}

void SliceOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  std::vector<TensorDesc> y;
  if (in.size() != 1 || !infer(in, y).ok()) return out.push_back(sbp::all_r(in.size(), 1));
  splits_off_dim(in[0].shape, *resolve_dim(dim, static_cast<int>(in[0].shape.size())), 1, 1, parts, out);
}

void ChannelShuffleOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  std::vector<TensorDesc> y;
  if (in.size() != 1 || !infer(in, y).ok()) return out.push_back(sbp::all_r(in.size(), 1));
  splits_off_dim(in[0].shape, 1, 1, 1, parts, out);
}

// ---- API ----
Tensor transpose(const Tensor& x, int d0, int d1) {
  return call1(std::make_shared<PermuteOp>(true, std::vector<int>{d0, d1}), {x});
}
Tensor permute(const Tensor& x, std::vector<int> dims) {
  return call1(std::make_shared<PermuteOp>(false, std::move(dims)), {x});
}
Tensor concat(std::span<const Tensor> xs, int dim) { return call1(std::make_shared<ConcatOp>(dim), xs); }
TensorList split(const Tensor& x, std::vector<int64_t> sizes, int dim) {
  return call(std::make_shared<SplitOp>(std::move(sizes), dim), {x});
}
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end) {
  return call1(std::make_shared<SliceOp>(dim, start, end), {x});
}
Tensor channel_shuffle(const Tensor& x, int groups) { return call1(std::make_shared<ChannelShuffleOp>(groups), {x}); }

}  // namespace mtc
