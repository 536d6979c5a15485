// Shape rules and backward rules of the collective ops, and the API functions of
// include/mtc/distributed.h that issue them.
#include "dist/collective_ops.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd.h"
#include "mtc/interpreter.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc::dist {

absl::Status wait(comm::Work& w, const char* name, size_t bytes, KernelContext& ctx) {
  absl::Status s = w.wait();
  comm::Work::TimePoint start, end;
  if (w.interval(&start, &end)) ctx.comm_span(name, bytes, start, end);
  return s;
}

comm::ReduceOp to_comm(Reduce r) {
  switch (r) {
    case Reduce::kSum:
      return comm::ReduceOp::kSum;
    case Reduce::kAvg:
      return comm::ReduceOp::kAvg;
    case Reduce::kMax:
      return comm::ReduceOp::kMax;
  }
  return comm::ReduceOp::kSum;
}

absl::StatusOr<comm::DataType> to_comm(DType t) {
  switch (t) {
    case DType::kF32:
      return comm::DataType::kF32;
    case DType::kI32:
      return comm::DataType::kI32;
  }
  return absl::InvalidArgumentError(absl::StrCat("no collective for dtype ", dtype_name(t)));
}

namespace {

const char* reduce_name(Reduce r) { return comm::reduce_op_name(to_comm(r)); }

absl::Status expect_inputs(std::span<const TensorDesc> in, size_t n) {
  if (in.size() != n)
    return absl::InvalidArgumentError(absl::StrCat("expected ", n, " input(s), got ", in.size()));
  return absl::OkStatus();
}

// expect_rows: x has a dim 0 that splits into p blocks.
absl::Status expect_rows_divisible(const TensorDesc& x, int p) {
  if (x.shape.empty() || x.shape[0] % p != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("x is ", x.str(), ", expected a dim 0 divisible by the ", p, " ranks"));
  }
  return absl::OkStatus();
}

absl::Status expect_f32_for(Reduce r, const TensorDesc& x) {
  if (r == Reduce::kAvg && x.dtype != DType::kF32 && x.dtype != DType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat("avg of ", x.str()));
  }
  return absl::OkStatus();
}

// issue: runs op on inputs through the interpreter, without autograd history (for the
// non-differentiable collectives).
void issue(std::shared_ptr<const OpDef> op, std::span<const Tensor> inputs, Interpreter& interp) {
  interp.apply(std::move(op), inputs);
}

}  // namespace

std::string CollectiveOp::attrs() const { return absl::StrCat("world=", comm->world_size()); }
std::string ReducingOp::attrs() const {
  return absl::StrCat("op=", reduce_name(reduce), " ", CollectiveOp::attrs());
}

// ---- all_reduce ----
absl::Status AllReduceOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 1));
  MTC_RETURN_IF_ERROR(to_comm(in[0].dtype).status());
  MTC_RETURN_IF_ERROR(expect_f32_for(reduce, in[0]));
  out.push_back(in[0]);
  return absl::OkStatus();
}

absl::StatusOr<TensorList> AllReduceOp::backward(const BackwardArgs& a) const {
  const Tensor& g = a.grad_outputs[0];
  if (!g.defined()) return TensorList(1);
  // y_r = reduce_s x_s on every rank r, and the loss is the sum over r, so dx_s gathers
  // every rank's gradient: their sum (avg: their mean).
  if (reduce == Reduce::kAvg) return TensorList{all_reduce(g, Reduce::kAvg, comm)};
  Tensor summed = all_reduce(g, Reduce::kSum, comm);
  if (reduce == Reduce::kSum) return TensorList{summed};
  return TensorList{call1(std::make_shared<MaxGradMaskOp>(), {a.inputs[0], a.outputs[0], summed})};
}

// ---- all_gather ----
absl::Status AllGatherOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 1));
  MTC_RETURN_IF_ERROR(to_comm(in[0].dtype).status());
  if (in[0].shape.empty())
    return absl::InvalidArgumentError(absl::StrCat("x is ", in[0].str(), ", expected a dim 0"));
  TensorDesc y = in[0];
  y.shape[0] *= comm->world_size();
  out.push_back(std::move(y));
  return absl::OkStatus();
}

absl::StatusOr<TensorList> AllGatherOp::backward(const BackwardArgs& a) const {
  const Tensor& g = a.grad_outputs[0];
  if (!g.defined()) return TensorList(1);
  return TensorList{reduce_scatter(g, Reduce::kSum, comm)};
}

// ---- reduce_scatter ----
absl::Status ReduceScatterOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 1));
  MTC_RETURN_IF_ERROR(to_comm(in[0].dtype).status());
  MTC_RETURN_IF_ERROR(expect_f32_for(reduce, in[0]));
  MTC_RETURN_IF_ERROR(expect_rows_divisible(in[0], comm->world_size()));
  TensorDesc y = in[0];
  y.shape[0] /= comm->world_size();
  out.push_back(std::move(y));
  return absl::OkStatus();
}

absl::StatusOr<TensorList> ReduceScatterOp::backward(const BackwardArgs& a) const {
  const Tensor& g = a.grad_outputs[0];
  if (!g.defined()) return TensorList(1);
  Tensor gathered = all_gather(g, comm);
  switch (reduce) {
    case Reduce::kSum:
      return TensorList{gathered};
    case Reduce::kAvg:
      return TensorList{scale(gathered, 1.f / comm->world_size())};
    case Reduce::kMax:
      break;
  }
  return TensorList{
      call1(std::make_shared<MaxGradMaskOp>(), {a.inputs[0], all_gather(a.outputs[0], comm), gathered})};
}

// ---- all_to_all ----
absl::Status AllToAllOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 1));
  MTC_RETURN_IF_ERROR(to_comm(in[0].dtype).status());
  const int p = comm->world_size();
  if (send_rows.empty() && recv_rows.empty()) {
    MTC_RETURN_IF_ERROR(expect_rows_divisible(in[0], p));
    out.push_back(in[0]);
    return absl::OkStatus();
  }
  if (static_cast<int>(send_rows.size()) != p || static_cast<int>(recv_rows.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("send_rows has ", send_rows.size(),
                                                   " entries and recv_rows ", recv_rows.size(),
                                                   ", expected one per rank (", p, ")"));
  }
  for (int64_t v : send_rows)
    if (v < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("send_rows [", absl::StrJoin(send_rows, ","), "] has a negative count"));
  for (int64_t v : recv_rows)
    if (v < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("recv_rows [", absl::StrJoin(recv_rows, ","), "] has a negative count"));
  const int64_t sent = std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0});
  if (in[0].shape.empty() || in[0].shape[0] != sent) {
    return absl::InvalidArgumentError(absl::StrCat("x is ", in[0].str(), ", expected ", sent,
                                                   " rows (the sum of send_rows [",
                                                   absl::StrJoin(send_rows, ","), "])"));
  }
  TensorDesc y = in[0];
  y.shape[0] = std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t{0});
  out.push_back(std::move(y));
  return absl::OkStatus();
}

absl::StatusOr<TensorList> AllToAllOp::backward(const BackwardArgs& a) const {
  const Tensor& g = a.grad_outputs[0];
  if (!g.defined()) return TensorList(1);
  // The inverse exchange: what came from rank r goes back to it.
  if (send_rows.empty()) return TensorList{all_to_all(g, comm)};
  return TensorList{all_to_all(g, recv_rows, send_rows, comm)};
}

void AllToAllOp::element_counts(const TensorView& x, const TensorView& y, std::vector<size_t>& send,
                                std::vector<size_t>& recv) const {
  // Every row has the same number of elements; x or y may have no rows at all.
  const int64_t row = x.shape()[0] > 0   ? x.numel() / x.shape()[0]
                      : y.shape()[0] > 0 ? y.numel() / y.shape()[0]
                                         : 0;
  const size_t p = send_rows.size();
  send.resize(p);
  recv.resize(p);
  for (size_t r = 0; r < p; ++r) {
    send[r] = static_cast<size_t>(send_rows[r] * row);
    recv[r] = static_cast<size_t>(recv_rows[r] * row);
  }
}

std::string AllToAllOp::attrs() const {
  if (send_rows.empty()) return CollectiveOp::attrs();
  return absl::StrCat("send=[", absl::StrJoin(send_rows, ","), "] recv=[", absl::StrJoin(recv_rows, ","),
                      "] ", CollectiveOp::attrs());
}

// ---- broadcast ----
namespace {
absl::Status check_root(int root, int p) {
  if (root < 0 || root >= p) {
    return absl::InvalidArgumentError(absl::StrCat("root ", root, ", expected a rank in [0, ", p, ")"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status BroadcastOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 1));
  MTC_RETURN_IF_ERROR(to_comm(in[0].dtype).status());
  MTC_RETURN_IF_ERROR(check_root(root, comm->world_size()));
  out.push_back(in[0]);
  return absl::OkStatus();
}

absl::StatusOr<TensorList> BroadcastOp::backward(const BackwardArgs& a) const {
  const Tensor& g = a.grad_outputs[0];
  if (!g.defined()) return TensorList(1);
  // Every rank's output came from root's x: root's gradient is their sum. Every rank
  // takes part in the sum; the others' inputs did not reach any output.
  Tensor summed = all_reduce(g, Reduce::kSum, comm);
  if (comm->rank() == root) return TensorList{summed};
  return TensorList{zeros(a.input_descs[0].shape)};
}

std::string BroadcastOp::attrs() const { return absl::StrCat("root=", root, " ", CollectiveOp::attrs()); }

absl::Status BroadcastInPlaceOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>&) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 1));
  MTC_RETURN_IF_ERROR(to_comm(in[0].dtype).status());
  return check_root(root, comm->world_size());
}

std::string BroadcastInPlaceOp::attrs() const {
  return absl::StrCat("root=", root, " ", CollectiveOp::attrs());
}

absl::Status BarrierOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>&) const {
  return expect_inputs(in, 0);
}

absl::Status MaxGradMaskOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  MTC_RETURN_IF_ERROR(expect_inputs(in, 3));
  for (int i = 1; i < 3; ++i) {
    if (in[i] != in[0] || in[0].dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("inputs ", in[0].str(), ", ", in[1].str(), ", ",
                                                     in[2].str(),
                                                     ": expected three f32 tensors of one shape"));
    }
  }
  out.push_back(in[0]);
  return absl::OkStatus();
}

// ---- data-parallel buckets ----
namespace {
absl::Status check_bucket(std::span<const TensorDesc> in) {
  if (in.size() < 2 || in.size() - 1 > kMaxBucketTensors) {
    return absl::InvalidArgumentError(
        absl::StrCat("a bucket of ", in.size() - 1, " gradients, expected 1 to ", kMaxBucketTensors));
  }
  size_t total = 0;
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("gradient ", i - 1, " is ", in[i].str(), ", expected f32"));
    }
    total += in[i].numel();
  }
  if (in[0].dtype != DType::kF32 || static_cast<size_t>(in[0].numel()) < total) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket buffer ", in[0].str(), ", expected f32 of at least ", total, " elements"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status BucketReduceOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>&) const {
  return check_bucket(in);
}
absl::Status BucketWaitOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>&) const {
  return check_bucket(in);
}

// ---- API ----
namespace {
void expect_comm(const CommPtr& c) { MTC_CHECK(c != nullptr, "a collective without a communicator"); }
}  // namespace

Tensor all_reduce(const Tensor& x, Reduce op, const CommPtr& c) {
  expect_comm(c);
  return call1(std::make_shared<AllReduceOp>(c, op), {x});
}

Tensor all_gather(const Tensor& x, const CommPtr& c) {
  expect_comm(c);
  return call1(std::make_shared<AllGatherOp>(c), {x});
}

Tensor reduce_scatter(const Tensor& x, Reduce op, const CommPtr& c) {
  expect_comm(c);
  return call1(std::make_shared<ReduceScatterOp>(c, op), {x});
}

Tensor all_to_all(const Tensor& x, const CommPtr& c) {
  expect_comm(c);
  return call1(std::make_shared<AllToAllOp>(c, std::vector<int64_t>{}, std::vector<int64_t>{}), {x});
}

Tensor all_to_all(const Tensor& x, std::vector<int64_t> send_rows, std::vector<int64_t> recv_rows,
                  const CommPtr& c) {
  expect_comm(c);
  return call1(std::make_shared<AllToAllOp>(c, std::move(send_rows), std::move(recv_rows)), {x});
}

Tensor broadcast(const Tensor& x, int root, const CommPtr& c) {
  expect_comm(c);
  return call1(std::make_shared<BroadcastOp>(c, root), {x});
}

void broadcast_(const Tensor& x, int root, const CommPtr& c) {
  expect_comm(c);
  Tensor in[] = {x};
  issue(std::make_shared<BroadcastInPlaceOp>(c, root), in, *x.interpreter());
}

absl::Status barrier(Interpreter& interp, const CommPtr& c) {
  expect_comm(c);
  issue(std::make_shared<BarrierOp>(c), {}, interp);
  return interp.sync();
}

}  // namespace mtc::dist
