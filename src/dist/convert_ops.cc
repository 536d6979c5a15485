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

// Layout: a dimension d of a row-major shape viewed as (outer, n, inner).
struct Layout {
  int64_t outer = 1, n = 1, inner = 1;
};
Layout layout_along(const Shape& s, int d) {
  Layout l;
  for (int i = 0; i < d; ++i) l.outer *= s[i];
  l.n = s[d];
  for (size_t i = d + 1; i < s.size(); ++i) l.inner *= s[i];
  return l;
}

using Buffer = ConvertKernel::Buffer;

// shard_copy: shard `s` of the (outer, n, inner) tensor `whole` to or from the packed
// (outer, s.size, inner) block at `at` of `packed`.
ConvertKernel::Copy shard_copy(const Layout& l, partition::Range s, Buffer whole, Buffer packed, size_t at,
                               bool to_packed) {
  const auto w = static_cast<size_t>(s.size * l.inner), n = static_cast<size_t>(l.n * l.inner);
  const auto off = static_cast<size_t>(s.offset * l.inner);
  if (to_packed) return {packed, whole, at, w, off, n, w, l.outer};
  return {whole, packed, off, n, at, w, w, l.outer};
}

}  // namespace

ConvertKernel kernel_plan(const ConvertOp& op, const Shape& x, const Shape& y) {
  const int p = op.comm->world_size();
  ConvertKernel k;
  k.step = op.step.step;
  switch (k.step) {
    case Step::kAllReduce:
      k.count = static_cast<size_t>(numel(x));
      break;
    case Step::kAllGather:  // x (outer, len_me, inner) -> y (outer, n, inner)
    case Step::kReduceScatter: {  // x (outer, n, inner) -> y (outer, len_me, inner)
      const bool gather = k.step == Step::kAllGather;
      const Layout l = layout_along(op.global.shape, gather ? op.from.dim : op.to.dim);
      // Every rank's block padded to the largest shard, so the native collective runs.
      const size_t block = static_cast<size_t>(l.outer * partition::shard_range(l.n, p, 0).size * l.inner);
      k.count = block;
      if (l.outer == 1 && l.n % p == 0) break;  // even shards of dim 0 (or alike): y or x are the blocks
      const size_t mine = static_cast<size_t>(numel(gather ? x : y));
      k.scratch = (p + 1) * block;  // p blocks, then this rank's own (padded) block
      const size_t own = p * block;
      if (gather) {
        if (mine != block) {  // pad this rank's shard
          k.pack.push_back({Buffer::kScratch, Buffer::kX, own, mine, 0, mine, mine, 1});
          k.zero.push_back({own + mine, block - mine});
          k.send = Buffer::kScratch;
          k.send_at = own;
        }
        k.recv = Buffer::kScratch;
        for (int r = 0; r < p; ++r) {
          k.unpack.push_back(shard_copy(l, partition::shard_range(l.n, p, r), Buffer::kY, Buffer::kScratch,
                                        r * block, /*to_packed=*/false));
        }
      } else {
        for (int r = 0; r < p; ++r) {
          const partition::Range s = partition::shard_range(l.n, p, r);
          k.pack.push_back(shard_copy(l, s, Buffer::kX, Buffer::kScratch, r * block, /*to_packed=*/true));
          const size_t len = static_cast<size_t>(l.outer * s.size * l.inner);
          if (len < block) k.zero.push_back({r * block + len, block - len});
        }
        k.send = Buffer::kScratch;
        if (mine != block) {  // received padded: this rank's shard is the block's beginning
          k.recv = Buffer::kScratch;
          k.recv_at = own;
          k.unpack.push_back({Buffer::kY, Buffer::kScratch, 0, mine, own, mine, mine, 1});
        }
      }
      break;
    }
    case Step::kAllToAll: {  // x: d cut, d' whole -> y: d whole, d' cut
      const Layout lx = layout_along(x, op.to.dim), ly = layout_along(y, op.from.dim);
      k.send_counts.resize(p);
      k.recv_counts.resize(p);
      size_t sent = 0, received = 0;
      for (int q = 0; q < p; ++q) {
        k.send_counts[q] = static_cast<size_t>(lx.outer * partition::shard_range(lx.n, p, q).size * lx.inner);
        k.recv_counts[q] = static_cast<size_t>(ly.outer * partition::shard_range(ly.n, p, q).size * ly.inner);
        sent += k.send_counts[q];
        received += k.recv_counts[q];
      }
      k.scratch = sent + received;
      k.send = k.recv = Buffer::kScratch;
      k.recv_at = sent;
      size_t s_at = 0, r_at = sent;
      for (int q = 0; q < p; ++q) {
        // To rank q: x's shard q of d'. From rank q: its shard of d, this rank's of d'.
        k.pack.push_back(shard_copy(lx, partition::shard_range(lx.n, p, q), Buffer::kX, Buffer::kScratch, s_at, true));
        k.unpack.push_back(
            shard_copy(ly, partition::shard_range(ly.n, p, q), Buffer::kY, Buffer::kScratch, r_at, false));
        s_at += k.send_counts[q];
        r_at += k.recv_counts[q];
      }
      break;
    }
    default:
      break;
  }
  return k;
}

std::shared_ptr<comm::Work> ConvertKernel::issue(comm::Communicator& c) const {
  const void* s = at(send, send_at);
  void* r = at(recv, recv_at);
  switch (step) {
    case Step::kAllReduce:
      return c.all_reduce(s, r, count, type, comm::ReduceOp::kSum);
    case Step::kAllGather:
      return c.all_gather(s, r, count, type);
    case Step::kReduceScatter:
      return c.reduce_scatter(s, r, count, type, comm::ReduceOp::kSum);
    default:  // all_to_all (the op's infer admits nothing else)
      return c.all_to_all_v(s, send_counts, r, recv_counts, type);
  }
}

absl::StatusOr<ConvertKernel> prepare_kernel(const ConvertOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(const comm::DataType t, to_comm(op.global.dtype));
  ConvertKernel k = kernel_plan(op, a.in[0].shape(), a.out[0].shape());
  k.type = t;
  k.element_bytes = dtype_size(op.global.dtype);
  k.base[0] = static_cast<char*>(a.in[0].data);
  k.base[1] = static_cast<char*>(a.out[0].data);
  if (k.scratch > 0) {
    MTC_ASSIGN_OR_RETURN(void* s, a.ctx.scratch(k.scratch * k.element_bytes));
    k.base[2] = static_cast<char*>(s);
  }
  return k;
}

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
  // No gradient counts as zeros: the backward is a collective, which every rank must run.
  const Tensor g = a.grad_outputs[0].defined() ? a.grad_outputs[0] : zeros(a.output_descs[0].shape);
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
