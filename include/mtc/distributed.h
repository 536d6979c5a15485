// Training across ranks: collectives on tensors, synchronised batch norm and data
// parallelism. Every function here is collective: each rank of the communicator must
// call it, in the same order, with matching shapes.
//
// The collectives are ops of the registry, issued through the interpreter like any op,
// with backward rules, so partitioned layers and mixture-of-experts can use them under
// autograd. The gradient rules assume that the quantity differentiated is the sum of the
// ranks' losses. A collective's outputs are never dropped by DTE (a recompute on one rank
// would wait for ranks that are not recomputing); they may be swapped to host memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mtc/nn.h"
#include "mtc/tensor.h"

namespace mtc::comm {
class Communicator;
}

namespace mtc::dist {

using CommPtr = std::shared_ptr<comm::Communicator>;

enum class Reduce : uint8_t { kSum = 0, kAvg = 1, kMax = 2 };

// all_reduce: every rank gets the elementwise reduction of x over the ranks.
// Backward: the gradients are all-reduced with sum (kSum) or avg (kAvg); for kMax the
// summed gradient goes to the elements of x equal to the maximum (every tied one).
Tensor all_reduce(const Tensor& x, Reduce op, const CommPtr& c);
// all_gather: x (N, ...) on each rank -> (p * N, ...), rank r's rows at r * N.
// Backward: reduce_scatter with sum.
Tensor all_gather(const Tensor& x, const CommPtr& c);
// reduce_scatter: x (p * N, ...) -> (N, ...): rank r gets the reduction of block r of
// every rank's x. Backward: all_gather (scaled by 1/p for kAvg; masked for kMax).
Tensor reduce_scatter(const Tensor& x, Reduce op, const CommPtr& c);
// all_to_all: x's dim 0 is cut into p equal blocks; block r goes to rank r, and the
// result holds rank r's block for this rank at block r. Backward: the inverse exchange.
Tensor all_to_all(const Tensor& x, const CommPtr& c);
// all_to_all (uneven): send_rows[r] rows of x (dim 0, in rank order) go to rank r;
// recv_rows[r] rows come from rank r, so the result has sum(recv_rows) rows. recv_rows[r]
// must equal what rank r sends here. Backward: the exchange with the counts swapped.
Tensor all_to_all(const Tensor& x, std::vector<int64_t> send_rows, std::vector<int64_t> recv_rows,
                  const CommPtr& c);
// broadcast: every rank gets root's x. Backward: root gets the sum of every rank's
// gradient, the other ranks none (zeros).
Tensor broadcast(const Tensor& x, int root, const CommPtr& c);
// broadcast_: overwrites x on every rank with root's x, in place (parameters at start-up).
void broadcast_(const Tensor& x, int root, const CommPtr& c);
// barrier: waits until every rank has issued its commands up to here and reached it.
absl::Status barrier(Interpreter& interp, const CommPtr& c);

// sync_batch_norm: batch norm whose statistics are those of the whole global batch: each
// rank sums x and x^2 per channel, the sums are all-reduced, and every rank normalises
// with the global mean and variance (as torch.nn.SyncBatchNorm). The backward all-reduces
// each channel's sums of dy and dy (x - mean), so dx is exactly that of batch norm over
// the global batch; gamma's and beta's gradients are the rank's own share.
// Running statistics (when given) are updated with the global ones.
Tensor sync_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, float momentum, float eps, const CommPtr& c);
// convert_sync_batch_norm: every BatchNorm2d in net normalises with sync_batch_norm over
// c's ranks in training from now on (eval still uses the running statistics). Returns
// how many layers were converted.
int convert_sync_batch_norm(nn::Module& net, const CommPtr& c);

// ---- data parallelism ----

struct DataParallelOptions {
  // bucket_bytes: gradient bytes per bucket; a bucket is all-reduced as one message as
  // soon as the backward has completed every gradient in it. At most 63 gradients.
  size_t bucket_bytes = size_t{2} << 20;
  bool broadcast_parameters = true;  // copy rank 0's parameters and buffers at creation
  // reduce: kAvg averages the gradients (each rank's loss is the mean over its share of
  // the batch); kSum adds them (DTP: the loss is a sum over the ranks already).
  Reduce reduce = Reduce::kAvg;
  // scale: multiplies the reduced gradients as they are unpacked (DTP's mesh: 1/G after
  // a sum over the G groups' ranks). 1 leaves them as reduced; must be finite.
  float scale = 1.f;
  // local: parameters each rank holds for itself (expert parallelism's experts): not
  // broadcast and not all-reduced; finish() divides their gradients by the number of
  // ranks, since each already sums what every rank's loss sent it, and each rank's loss
  // is the mean over its own share of the batch.
  TensorList local = {};
};

// DataParallelFigures: totals since creation.
struct DataParallelFigures {
  int buckets = 0;             // buckets per iteration
  size_t bucket_bytes = 0;     // the buckets' buffers in the comm/gradient region, in all
  uint64_t reductions = 0;     // bucket all-reduces completed
  double comm_sec = 0;         // time the all-reduces ran on the communicator's queue
  double exposed_sec = 0;      // time the interpreter waited for them after the backward
  double bucket_copy_sec = 0;  // packing gradients into buckets and unpacking them
  uint64_t reduced_bytes = 0;  // gradient bytes all-reduced (a parameter without a gradient is left out)
};

// DataParallel: averages a module's parameter gradients over the ranks during the
// backward. Gradients live in the comm/gradient region (m1); they are grouped, in
// reverse parameter order (roughly the order the backward completes them), into
// buckets, each with a flat buffer in m1. When the backward completes a bucket's last
// gradient, the gradients are packed into the buffer and its all-reduce (average) starts
// on the communicator's queue while the backward goes on; finish() waits for them and
// unpacks. Use: loss.backward(); dp->finish(); opt.step().
class DataParallel {
 public:
  // create: for the module's parameters but o.local, and its buffers.
  static absl::StatusOr<std::unique_ptr<DataParallel>> create(nn::Module& net, CommPtr c,
                                                               const DataParallelOptions& o = {});
  // create: for these parameters only (DTP's Replicated ones), without buffers.
  static absl::StatusOr<std::unique_ptr<DataParallel>> create(TensorList params, CommPtr c,
                                                               const DataParallelOptions& o = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // finish: starts the buckets the backward did not complete, with the gradients that
  // exist (a parameter the backward did not reach gets none and no update; the ranks
  // must reach the same ones: Note [Unused parameters] in data_parallel.cc), then waits
  // for every bucket and unpacks the averages into the gradients. Issues ops; a failure
  // surfaces at the next synchronising call.
  void finish();
  // figures: synchronises with the interpreter, then reads the totals.
  absl::StatusOr<DataParallelFigures> figures();
  const CommPtr& communicator() const { return comm_; }

 private:
  struct Bucket;
  DataParallel(TensorList params, CommPtr c, const DataParallelOptions& o);
  void launch(Bucket& b);
  absl::Status init();

  CommPtr comm_;
  DataParallelOptions opts_;
  TensorList params_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::shared_ptr<DataParallelFigures> figures_;  // written by the ops' kernels
  Interpreter* interp_ = nullptr;
};

}  // namespace mtc::dist
