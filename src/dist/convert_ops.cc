// Shape and backward rules of the placement conversions, and dist::convert, which issues
// them (src/dist/convert_ops.h).
#include "dist/convert_ops.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/status.h"
#include "ops/shape_ops.h"

namespace mtc::dist {

using partition::Kind;
using partition::Placement;
using partition::Step;

ConvertLayout layout_along(const Shape& s, int d) {
  ConvertLayout l;
  for (int i = 0; i < d; ++i) l.outer *= s[i];
  l.n = s[d];
  for (size_t i = d + 1; i < s.size(); ++i) l.inner *= s[i];
  return l;
}

Step break_convert_backward() {
  static const Step broken = [] {
    const char* v = std::getenv("MTC_TESTING_BREAK_CONVERT_BACKWARD");
    if (v == nullptr || *v == '\0') return Step::kNone;
    for (Step s : {Step::kAllGather, Step::kAllToAll, Step::kAllReduce, Step::kReduceScatter}) {
      if (std::strcmp(v, partition::step_name(s)) == 0) return s;
    }
    return Step::kNone;
  }();
  return broken;
}

namespace {

// check_placement: a Split placement names a dimension of the global tensor.
absl::Status check_placement(const TensorDesc& global, Placement p) {
  if (p.split() && (p.dim < 0 || p.dim >= static_cast<int>(global.shape.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement ", p.str(), " of ", global.str(), ": the split dimension is out of range"));
  }
  return absl::OkStatus();
}

}  // namespace

ConvertOp::ConvertOp(CommPtr c, TensorDesc g, Placement f, Placement t)
    : CollectiveOp(std::move(c)), global(std::move(g)), from(f), to(t), step(partition::plan_conversion(f, t)) {}

absl::Status ConvertOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  if (in.size() != 1) return absl::InvalidArgumentError(absl::StrCat("expected 1 input, got ", in.size()));
  MTC_RETURN_IF_ERROR(to_comm(global.dtype).status());
  MTC_RETURN_IF_ERROR(check_placement(global, from));
  MTC_RETURN_IF_ERROR(check_placement(global, to));
  const int p = comm->world_size(), r = comm->rank();
  const TensorDesc want{partition::local_shape(global.shape, from, p, r), global.dtype};
  if (in[0] != want) {
    return absl::InvalidArgumentError(absl::StrCat("x is ", in[0].str(), ", expected ", want.str(), ": rank ", r,
                                                   "'s shard of ", partition::describe(global, from), " over ",
                                                   p, " ranks"));
  }
  switch (step.step) {
    case Step::kAllGather:
    case Step::kAllToAll:
    case Step::kAllReduce:
    case Step::kReduceScatter:
      break;
    case Step::kNone:
    case Step::kSlice:  // convert() issues these without a ConvertOp; only a bad shape gets here
      return absl::InvalidArgumentError(absl::StrCat(from.str(), " -> ", to.str(), " is not a collective"));
    case Step::kUnsupported:
      return absl::InvalidArgumentError(absl::StrCat(from.str(), " -> ", to.str(), " is not a conversion (",
                                                     "a tensor becomes Partial only as an op's output)"));
  }
  out.push_back(TensorDesc{partition::local_shape(global.shape, to, p, r), global.dtype});
  return absl::OkStatus();
}

absl::StatusOr<TensorList> ConvertOp::backward(const BackwardArgs& a) const {
  const Tensor& g = a.grad_outputs[0];
  if (!g.defined()) return TensorList(1);
  if (break_convert_backward() == step.step) {
    // TESTING ONLY (MTC_TESTING_BREAK_CONVERT_BACKWARD): a rule that keeps only this rank's
    // part of the gradient, with no communication.
    switch (step.step) {
      case Step::kAllGather:  // should be reduce_scatter: the local slice instead
        return TensorList{convert(g, global, Placement::R(), from, comm)};
      case Step::kReduceScatter: {  // should be all_gather: zero-padded instead
        const partition::Range s = partition::shard_range(global.shape[to.dim], comm->world_size(), comm->rank());
        return TensorList{call1(std::make_shared<SliceBackwardOp>(to.dim, s.offset, global.shape[to.dim]), {g})};
      }
      case Step::kAllReduce:  // should be all_reduce: the gradient as it is
        return TensorList{g};
      default:  // all_to_all: zeros
        return TensorList{zeros(a.input_descs[0].shape)};
    }
  }
  // The adjoints, as conversions of the gradient (Partial: each rank's gradient is its
  // addend of the sum over ranks):
  switch (step.step) {
    case Step::kAllGather:  // S(d) -> R: P -> S(d), a reduce_scatter
      return TensorList{convert(g, global, Placement::P(), from, comm)};
    case Step::kReduceScatter:  // P -> S(d): S(d) -> R, an all_gather
      return TensorList{convert(g, global, to, Placement::R(), comm)};
    case Step::kAllReduce:  // P -> R: its own adjoint (every rank's x reaches every rank's y)
      return TensorList{convert(g, global, Placement::P(), Placement::R(), comm)};
    default:  // S(d) -> S(d'): the inverse all_to_all, S(d') -> S(d)
      return TensorList{convert(g, global, to, from, comm)};
  }
}

std::string ConvertOp::attrs() const {
  std::string s = partition::step_name(step.step);
  switch (step.step) {
    case Step::kAllGather:
      absl::StrAppend(&s, " d=", from.dim);
      break;
    case Step::kReduceScatter:
      absl::StrAppend(&s, " d=", to.dim);
      break;
    case Step::kAllToAll:
      absl::StrAppend(&s, " d=", from.dim, "->", to.dim);
      break;
    default:
      break;
  }
  absl::StrAppend(&s, " ", global.str(), " ", CollectiveOp::attrs());
  return s;
}

Tensor convert(const Tensor& x, const TensorDesc& global, Placement from, Placement to, const CommPtr& c) {
  MTC_CHECK(c != nullptr, "a conversion without a communicator");
  if (from == to) return x;
  const partition::Conversion plan = partition::plan_conversion(from, to);
  if (plan.step == Step::kSlice && check_placement(global, to).ok() && x.defined() && x.desc() == global) {
    // R -> S(d): this rank's shard, an ordinary (recomputable) slice; its backward pads
    // the gradient back to the whole with zeros.
    const partition::Range s = partition::shard_range(global.shape[to.dim], c->world_size(), c->rank());
    return call1(std::make_shared<SliceOp>(to.dim, s.offset, s.offset + s.size), {x});
  }
  // Every other step, and a slice with a bad input (its infer names what was expected).
  return call1(std::make_shared<ConvertOp>(c, global, from, to), {x});
}

}  // namespace mtc::dist
