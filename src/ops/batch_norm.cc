// Shape rules, cost estimates, the backward rule and the API function of batch_norm.
#include "ops/batch_norm.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autograd.h"
#include "dist/sync_batch_norm.h"
#include "mtc/distributed.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc {
namespace {

// expect_channel_vectors: in[first..] are f32 (C) vectors; names them in the message.
absl::Status expect_channel_vectors(std::span<const TensorDesc> in, size_t first, int64_t c,
                                    std::initializer_list<const char*> names) {
  size_t i = first;
  for (const char* name : names) {
    if (in[i].dtype != DType::kF32 || in[i].shape != Shape{c}) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is ", in[i].str(), ", expected f32[", c, "] (one value per channel of x)"));
    }
    ++i;
  }
  return absl::OkStatus();
}

absl::Status expect_batch_input(const TensorDesc& x) {
  if (x.dtype != DType::kF32 || x.shape.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("x is ", x.str(), ", expected f32 (N, C, ...) with at least 2 dims"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BatchNormOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  const size_t n = tracks_running ? 5 : 3;
  if (in.size() != n) return absl::InvalidArgumentError(absl::StrCat("expected ", n, " inputs, got ", in.size()));
  if (!training && !tracks_running) {
    return absl::InvalidArgumentError("eval mode normalises with running_mean and running_var; none were given");
  }
  MTC_RETURN_IF_ERROR(expect_batch_input(in[0]));
  const int64_t c = in[0].shape[1];
  MTC_RETURN_IF_ERROR(expect_channel_vectors(in, 1, c, {"gamma", "beta"}));
  if (tracks_running) MTC_RETURN_IF_ERROR(expect_channel_vectors(in, 3, c, {"running_mean", "running_var"}));
  if (training && in[0].numel() / std::max<int64_t>(c, 1) <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("training needs more than 1 value per channel, x ", in[0].str(), " has ",
                     in[0].numel() / std::max<int64_t>(c, 1)));
  }
  if (!(momentum >= 0.f && momentum <= 1.f) || !(eps > 0.f)) {
    return absl::InvalidArgumentError(absl::StrFormat("momentum %g must be in [0, 1] and eps %g > 0", momentum, eps));
  }
  out.push_back(in[0]);
  out.push_back(TensorDesc{Shape{c}, DType::kF32});
  out.push_back(TensorDesc{Shape{c}, DType::kF32});
  return absl::OkStatus();
}

OpCost BatchNormOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  OpCost c = OpDef::cost(in, out);
  const double n = static_cast<double>(in[0].numel());
  c.flops = training ? 5 * n : 2 * n;        // statistics (sum, square, add) + scale-shift
  if (training) c.bytes_read += 4.0 * n;     // x is read twice
  return c;
}

absl::StatusOr<TensorList> BatchNormOp::backward(const BackwardArgs& a) const {
  TensorList g(a.input_descs.size());
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return g;  // mean and invstd are not differentiable outputs
  if (!a.needs_input_grad[0] && !a.needs_input_grad[1] && !a.needs_input_grad[2]) return g;
  TensorList d = call(std::make_shared<BatchNormBackwardOp>(training),
                      {a.inputs[0], a.inputs[1], a.outputs[1], a.outputs[2], dy});
  for (int i = 0; i < 3; ++i) {
    if (a.needs_input_grad[i]) g[i] = d[i];
  }
  return g;
}

std::string BatchNormOp::attrs() const {
  return absl::StrFormat("%s momentum=%g eps=%g%s", training ? "train" : "eval", momentum, eps,
                         tracks_running ? "" : " untracked");
}

absl::Status BatchNormBackwardOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  if (in.size() != 5) return absl::InvalidArgumentError(absl::StrCat("expected 5 inputs, got ", in.size()));
  MTC_RETURN_IF_ERROR(expect_batch_input(in[0]));
  const int64_t c = in[0].shape[1];
  MTC_RETURN_IF_ERROR(expect_channel_vectors(in, 1, c, {"gamma", "mean", "invstd"}));
  if (in[4] != in[0]) return absl::InvalidArgumentError(absl::StrCat("dy is ", in[4].str(), ", expected ", in[0].str()));
  out.push_back(in[0]);
  out.push_back(in[1]);
  out.push_back(in[1]);
  return absl::OkStatus();
}

OpCost BatchNormBackwardOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  OpCost c = OpDef::cost(in, out);
  const double n = static_cast<double>(in[0].numel());
  c.flops = 7 * n;
  c.bytes_read += 8.0 * n;  // x and dy are read twice
  return c;
}

std::string BatchNormBackwardOp::attrs() const { return training ? "train" : "eval"; }

void BatchNormOp::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  using namespace sbp;
  const size_t n = in.size();
  out.push_back(all_r(n, 3));
  std::vector<TensorDesc> y;
  if (!infer(in, y).ok()) return;
  const Shape& x = in[0].shape;
  if (can_split(x, 1, parts)) {
    Signature s = uniform(n, Placement::S(0), 3, Placement::S(0));
    s.in[0] = s.out[0] = Placement::S(1);
    out.push_back(std::move(s));
  }
  for (int d = 0; d < static_cast<int>(x.size()); ++d) {
    if (d == 1 || !can_split(x, d, parts) || (training && d != 0)) continue;
    Signature s = all_r(n, 3);
    s.in[0] = s.out[0] = Placement::S(d);
    out.push_back(std::move(s));
  }
}

std::optional<TensorList> BatchNormOp::shard_run(const partition::Signature& s, std::span<const TensorDesc>,
                                                 std::span<const Tensor> x, const ShardContext& g) const {
  // Training on a split batch: each rank's rows by their own statistics (the op runs on
  // the local rows as is), unless the group asks for the whole batch's (--sync_bn).
  // A group of one rank holds the whole batch: nothing to combine.
  if (!training || s.in.empty() || !s.in[0].split() || s.in[0].dim == 1 || g.shard_bn_stats || g.parts == 1) {
    return std::nullopt;
  }
  MTC_CHECK(g.comm != nullptr, "batch_norm over a split batch needs the group's communicator");
  Tensor global = dist::all_reduce(call1(std::make_shared<dist::BnStatsOp>(), {x[0]}), dist::Reduce::kSum, g.comm);
  std::vector<Tensor> in = {x[0], x[1], x[2], global};
  if (tracks_running) {
    in.push_back(x[3]);
    in.push_back(x[4]);
  }
  return call(std::make_shared<dist::SyncBatchNormOp>(momentum, eps, tracks_running, g.comm), in);
}

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                  const Tensor& running_var, bool training, float momentum, float eps) {
  const bool tracked = running_mean.defined() || running_var.defined();
  if (tracked) {
    return call(std::make_shared<BatchNormOp>(training, momentum, eps, true),
                {x, gamma, beta, running_mean, running_var})[0];
  }
  return call(std::make_shared<BatchNormOp>(training, momentum, eps, false), {x, gamma, beta})[0];
}

}  // namespace mtc
