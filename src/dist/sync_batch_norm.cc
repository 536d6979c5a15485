// Shape rules and backward rules of synchronised batch norm's ops, sync_batch_norm and
// convert_sync_batch_norm (include/mtc/distributed.h).
#include "dist/sync_batch_norm.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autograd.h"
#include "mtc/distributed.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc::dist {
namespace {

absl::Status expect_x(const TensorDesc& x) {
  if (x.dtype != DType::kF32 || x.shape.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("x is ", x.str(), ", expected f32 (N, C, ...) with at least 2 dims"));
  }
  return absl::OkStatus();
}

absl::Status expect_desc(const char* name, const TensorDesc& got, const TensorDesc& want) {
  if (got != want)
    return absl::InvalidArgumentError(absl::StrCat(name, " is ", got.str(), ", expected ", want.str()));
  return absl::OkStatus();
}

TensorDesc channels(int64_t c) { return TensorDesc{Shape{c}, DType::kF32}; }
TensorDesc stats_desc(int64_t c) { return TensorDesc{Shape{kStatRows, c}, DType::kF32}; }
TensorDesc sums_desc(int64_t c) { return TensorDesc{Shape{kGradSumRows, c}, DType::kF32}; }

}  // namespace

absl::Status BnStatsOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  if (in.size() != 1) return absl::InvalidArgumentError(absl::StrCat("expected 1 input, got ", in.size()));
  MTC_RETURN_IF_ERROR(expect_x(in[0]));
  out.push_back(stats_desc(in[0].shape[1]));
  return absl::OkStatus();
}

OpCost BnStatsOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  OpCost c = OpDef::cost(in, out);
  c.flops = 3.0 * in[0].numel();
  return c;
}

absl::Status SyncBatchNormOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  const size_t n = tracks_running ? 6 : 4;
  if (in.size() != n)
    return absl::InvalidArgumentError(absl::StrCat("expected ", n, " inputs, got ", in.size()));
  MTC_RETURN_IF_ERROR(expect_x(in[0]));
  const int64_t c = in[0].shape[1];
  MTC_RETURN_IF_ERROR(expect_desc("gamma", in[1], channels(c)));
  MTC_RETURN_IF_ERROR(expect_desc("beta", in[2], channels(c)));
  MTC_RETURN_IF_ERROR(expect_desc("stats", in[3], stats_desc(c)));
  if (tracks_running) {
    MTC_RETURN_IF_ERROR(expect_desc("running_mean", in[4], channels(c)));
    MTC_RETURN_IF_ERROR(expect_desc("running_var", in[5], channels(c)));
  }
  if (!(momentum >= 0.f && momentum <= 1.f) || !(eps > 0.f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("momentum %g must be in [0, 1] and eps %g > 0", momentum, eps));
  }
  out.push_back(in[0]);
  out.push_back(channels(c));
  out.push_back(channels(c));
  return absl::OkStatus();
}

OpCost SyncBatchNormOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  OpCost c = OpDef::cost(in, out);
  c.flops = 2.0 * in[0].numel();
  return c;
}

absl::StatusOr<TensorList> SyncBatchNormOp::backward(const BackwardArgs& a) const {
  TensorList g(a.input_descs.size());
  const Tensor& dy = a.grad_outputs[0];
  if (!dy.defined()) return g;
  const Tensor& x = a.inputs[0];
  const Tensor& mean = a.outputs[1];
  Tensor sums = call1(std::make_shared<BnGradSumsOp>(), {x, mean, dy});
  Tensor global = comm != nullptr ? all_reduce(sums, Reduce::kSum, comm) : sums;
  TensorList d = call(std::make_shared<SyncBatchNormBackwardOp>(),
                      {x, a.inputs[1], a.inputs[3], mean, a.outputs[2], dy, sums, global});
  for (int i = 0; i < 3; ++i) {
    if (a.needs_input_grad[i]) g[i] = d[i];
  }
  return g;  // stats: none (dx holds the gradient through it)
}

std::string SyncBatchNormOp::attrs() const {
  return absl::StrFormat("momentum=%g eps=%g%s", momentum, eps, tracks_running ? "" : " untracked");
}

absl::Status BnGradSumsOp::infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const {
  if (in.size() != 3) return absl::InvalidArgumentError(absl::StrCat("expected 3 inputs, got ", in.size()));
  MTC_RETURN_IF_ERROR(expect_x(in[0]));
  const int64_t c = in[0].shape[1];
  MTC_RETURN_IF_ERROR(expect_desc("mean", in[1], channels(c)));
  MTC_RETURN_IF_ERROR(expect_desc("dy", in[2], in[0]));
  out.push_back(sums_desc(c));
  return absl::OkStatus();
}

OpCost BnGradSumsOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  OpCost c = OpDef::cost(in, out);
  c.flops = 4.0 * in[0].numel();
  return c;
}

absl::Status SyncBatchNormBackwardOp::infer(std::span<const TensorDesc> in,
                                            std::vector<TensorDesc>& out) const {
  if (in.size() != 8) return absl::InvalidArgumentError(absl::StrCat("expected 8 inputs, got ", in.size()));
  MTC_RETURN_IF_ERROR(expect_x(in[0]));
  const int64_t c = in[0].shape[1];
  MTC_RETURN_IF_ERROR(expect_desc("gamma", in[1], channels(c)));
  MTC_RETURN_IF_ERROR(expect_desc("stats", in[2], stats_desc(c)));
  MTC_RETURN_IF_ERROR(expect_desc("mean", in[3], channels(c)));
  MTC_RETURN_IF_ERROR(expect_desc("invstd", in[4], channels(c)));
  MTC_RETURN_IF_ERROR(expect_desc("dy", in[5], in[0]));
  MTC_RETURN_IF_ERROR(expect_desc("sums", in[6], sums_desc(c)));
  MTC_RETURN_IF_ERROR(expect_desc("global_sums", in[7], sums_desc(c)));
  out.push_back(in[0]);
  out.push_back(channels(c));
  out.push_back(channels(c));
  return absl::OkStatus();
}

OpCost SyncBatchNormBackwardOp::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  OpCost c = OpDef::cost(in, out);
  c.flops = 5.0 * in[0].numel();
  return c;
}

Tensor sync_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, float momentum, float eps, const CommPtr& c) {
  MTC_CHECK(c != nullptr, "sync_batch_norm without a communicator");
  Tensor local = call1(std::make_shared<BnStatsOp>(), {x});
  Tensor global = all_reduce(local, Reduce::kSum, c);
  const bool tracked = running_mean.defined() || running_var.defined();
  if (tracked) {
    return call(std::make_shared<SyncBatchNormOp>(momentum, eps, true, c),
                {x, gamma, beta, global, running_mean, running_var})[0];
  }
  return call(std::make_shared<SyncBatchNormOp>(momentum, eps, false, c), {x, gamma, beta, global})[0];
}

int convert_sync_batch_norm(nn::Module& net, const CommPtr& c) {
  int n = 0;
  if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&net)) {
    bn->sync = c;
    ++n;
  }
  for (const auto& [name, child] : net.children()) n += convert_sync_batch_norm(*child, c);
  return n;
}

}  // namespace mtc::dist
