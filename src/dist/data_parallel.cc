// DataParallel (include/mtc/distributed.h): buckets of parameter gradients, all-reduced
// (averaged) over the ranks as the backward completes them. See Note [Bucket overlap].
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "dist/collective_ops.h"
#include "mtc/distributed.h"
#include "mtc/interpreter.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc::dist {

// Note [Bucket overlap]
// A bucket's all-reduce is two ops. bucket_reduce, issued from the grad_ready hook of the
// bucket's last parameter (autograd.h), copies the gradients into the bucket's flat
// buffer in the comm/gradient region and starts the all-reduce on the communicator's
// queue (its own thread under MPI, its own stream under NCCL), then returns: the
// interpreter goes on with the rest of the backward while the ranks exchange the bucket.
// bucket_wait, issued by finish() after the backward, waits for it and copies the
// averages back into the gradients, which the optimizer then reads. The time spent
// waiting there is the part of the communication the backward did not hide.
//
// Note [Unused parameters]
// A parameter the backward did not reach this iteration (a SPOS supernet's choice blocks
// off the path, 3/4 of them) gets no gradient, is left out of its bucket's all-reduce,
// and so keeps no gradient: the optimizer skips it, with no momentum or weight-decay
// step. A bucket that some of its parameters never completed is started by finish(),
// with the gradients that exist packed one after another; one with none is not
// all-reduced at all. So the ranks must reach the same parameters, as SPOS's sampler,
// seeded alike on every rank, makes them: a rank that packs other gradients all-reduces
// a different count, which --comm_check (CommOptions::check_arguments) reports as a
// mismatch naming the collective instead of summing unlike buffers. PyTorch's DDP with
// find_unused_parameters instead all-reduces zeros for them every iteration.
struct DataParallel::Bucket {
  std::vector<size_t> params;  // indexes into params_, in the order they are packed
  std::vector<size_t> sent;    // the params_ packed this iteration (those with a gradient)
  size_t numel = 0;
  Tensor flat;
  std::shared_ptr<BucketState> state;
  size_t ready = 0;  // parameters whose gradient this backward has completed
  bool launched = false;
};

DataParallel::DataParallel(TensorList params, CommPtr c, const DataParallelOptions& o)
    : comm_(std::move(c)), opts_(o), params_(std::move(params)),
      figures_(std::make_shared<DataParallelFigures>()) {}

DataParallel::~DataParallel() {
  for (Tensor& p : params_) {
    if (p.meta()) p.meta()->grad_ready = nullptr;
  }
}

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::create(nn::Module& net, CommPtr c,
                                                                   const DataParallelOptions& o) {
  TensorList shared;
  for (const Tensor& p : net.parameters()) {
    const bool local = std::any_of(o.local.begin(), o.local.end(), [&](const Tensor& l) { return l.meta() == p.meta(); });
    if (!local) shared.push_back(p);
  }
  MTC_ASSIGN_OR_RETURN(std::unique_ptr<DataParallel> dp, create(std::move(shared), std::move(c), o));
  if (o.broadcast_parameters) {
    for (const Tensor& b : net.buffers()) broadcast_(b, 0, dp->comm_);
  }
  return dp;
}

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::create(TensorList params, CommPtr c,
                                                                   const DataParallelOptions& o) {
  if (c == nullptr) return absl::InvalidArgumentError("data parallel: no communicator");
  if (o.bucket_bytes == 0) return absl::InvalidArgumentError("data parallel: bucket_bytes 0, expected > 0");
  if (!std::isfinite(o.scale)) {
    return absl::InvalidArgumentError(absl::StrCat("data parallel: scale ", o.scale, ", expected a finite number"));
  }
  std::unique_ptr<DataParallel> dp(new DataParallel(std::move(params), std::move(c), o));
  if (dp->params_.empty()) return absl::InvalidArgumentError("data parallel: the module has no parameters");
  for (const Tensor& p : dp->params_) {
    if (!p.requires_grad() || p.meta()->grad_fn) {
      return absl::InvalidArgumentError("data parallel: a parameter is not a leaf that requires grad");
    }
  }
  dp->interp_ = dp->params_[0].interpreter();
  if (o.broadcast_parameters) {
    for (const Tensor& p : dp->params_) broadcast_(p, 0, dp->comm_);
  }
  MTC_RETURN_IF_ERROR(dp->init());
  return dp;
}

absl::Status DataParallel::init() {
  // Buckets in reverse parameter order: the backward completes the last layers first.
  auto start = [&] {
    buckets_.push_back(std::make_unique<Bucket>());
    buckets_.back()->state = std::make_shared<BucketState>();
    buckets_.back()->state->figures = figures_;
    buckets_.back()->state->reduce = to_comm(opts_.reduce);
    buckets_.back()->state->scale = opts_.scale;
  };
  start();
  for (size_t k = params_.size(); k-- > 0;) {
    Bucket* b = buckets_.back().get();
    const size_t n = static_cast<size_t>(params_[k].numel());
    const bool full = b->params.size() == kMaxBucketTensors ||
                      (!b->params.empty() && (b->numel + n) * sizeof(float) > opts_.bucket_bytes);
    if (full) {
      start();
      b = buckets_.back().get();
    }
    b->params.push_back(k);
    b->numel += n;
  }
  for (auto& bp : buckets_) {
    Bucket& b = *bp;
    std::vector<float> zero(b.numel, 0.f);
    b.flat = interp_->put(TensorDesc{Shape{static_cast<int64_t>(b.numel)}, DType::kF32}, zero.data(), true);
    interp_->make_gradient(b.flat);  // into the comm/gradient region, out of DTE's reach
    figures_->bucket_bytes += b.numel * sizeof(float);
    for (size_t k : b.params) {
      params_[k].meta()->grad_ready = [this, &b](AutogradMeta&) {
        if (++b.ready == b.params.size()) launch(b);
      };
    }
  }
  figures_->buckets = static_cast<int>(buckets_.size());
  return interp_->sync();
}

void DataParallel::launch(Bucket& b) {
  TensorList in{b.flat};
  b.sent.clear();
  for (size_t k : b.params) {
    if (!params_[k].grad().defined()) continue;  // not reached this iteration: Note [Unused parameters]
    b.sent.push_back(k);
    in.push_back(params_[k].grad());
  }
  if (!b.sent.empty()) interp_->apply(std::make_shared<BucketReduceOp>(comm_, b.state), in);
  b.launched = true;
}

void DataParallel::finish() {
  for (auto& b : buckets_) {
    if (!b->launched) launch(*b);
  }
  for (auto& bp : buckets_) {
    Bucket& b = *bp;
    if (!b.sent.empty()) {
      TensorList in{b.flat};
      for (size_t k : b.sent) in.push_back(params_[k].grad());
      interp_->apply(std::make_shared<BucketWaitOp>(comm_, b.state), in);
    }
    b.ready = 0;
    b.launched = false;
  }
  // Expert parallelism's own parameters (DataParallelOptions::local): each sums what every
  // rank's loss sent it; the ranks' losses are averaged, so it is divided by the ranks.
  const float share = 1.f / static_cast<float>(comm_->world_size());
  for (Tensor p : opts_.local) {
    if (!p.grad().defined()) continue;
    p.set_grad(scale(p.grad(), share));
    interp_->make_gradient(p.grad());
  }
}

absl::StatusOr<DataParallelFigures> DataParallel::figures() {
  MTC_RETURN_IF_ERROR(interp_->sync());
  return *figures_;
}

}  // namespace mtc::dist
