// DTP, dynamic tensor partition (docs/dtp.md): a model's parameters held across the
// ranks of a partition group in one of four modes per module, global tensors whose ops
// are split across the ranks, and the conversions between placements inserted as ops.
//
//   auto g = dtp::make_group(comm);                 // every rank of comm
//   dtp::pin(*block->attn->proj, dtp::Mode::kP3);   // a Megatron-style row split
//   MTC_RETURN_IF_ERROR(dtp::shard(net, dtp::Mode::kP4, g).status());  // the rest p4
//   auto reducer = *dtp::GradReducer::create(net, g, 2 << 20);
//   Tensor x = dtp::distribute(local_images, global_shape, Placement::S(0), g);
//   Tensor loss = cross_entropy(net(x), y);         // global; loss.item() reads it whole
//   loss.backward(); reducer->finish(); opt.step();
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mtc/distributed.h"
#include "mtc/nn.h"
#include "mtc/tensor.h"
#include "partition/placement.h"

namespace mtc {
struct ShardContext;
}

namespace mtc::dtp {

using partition::Mode;
using partition::Placement;
using Group = std::shared_ptr<const ShardContext>;

// make_group: a partition group of every rank of c (check: compare the placements of
// every dispatched op across the ranks, naming the op on a mismatch; --comm_check).
Group make_group(dist::CommPtr c, bool check = false);
int group_size(const Group& g);
int group_rank(const Group& g);

// parse_mode: "off" (kNone), "p1".."p4"; anything else is an error naming what was
// expected.
absl::StatusOr<Mode> parse_mode(const std::string& s);

// distribute: the global tensor of shape `global` held with placement p, of which
// `local` is this rank's part (its shard for Split, the whole for Replicated).
Tensor distribute(const Tensor& local, const Shape& global, Placement p, const Group& g);

// pin: module m (its own parameters, not its children's) is placed for mode `mode` by
// the next shard() of a model holding it, whatever mode shard() is given. Checked at once: a mode the module's op does
// not have (P3 on a depthwise convolution) is an error naming the module and its modes.
absl::Status pin(nn::Module& m, Mode mode);

// ShardFigures: what shard() did.
struct ShardFigures {
  int modules = 0;          // modules placed for the mode asked
  int kept_replicated = 0;  // modules that could not take it (a dimension below the
                            // group size, or an op without the mode) and stay P1
  std::vector<std::string> notes;  // one line per kept module: which and why
  size_t local_parameter_bytes = 0, global_parameter_bytes = 0;
};
// shard: places every parameter and buffer of net for `mode` (pins override per module)
// and replaces its storage by this rank's part: P1 Replicated; P2 parameters Split(0),
// gathered for each use (buffers stay Replicated); P3 Linear/Conv2d weights Split(in) with
// biases Replicated (added on rank 0), P4 Split(out) with biases Split(0); batch norm's
// parameters and statistics Split(0) under P3 and P4; embedding tables Split(0) (P3) or
// Split(1) (P4); layer norms stay Replicated. A model is sharded once. The parameters' values are the global ones every
// rank drew alike (initialisation draws globally; each rank keeps its shard), so results
// compare with one rank. Call before creating the optimizer.
absl::StatusOr<ShardFigures> shard(nn::Module& net, Mode mode, const Group& g);

// set_forced_mode: the mode ops take when their inputs allow several (mtc-train --dtp);
// shard() decides what the parameters allow. kNone: the fewest conversion bytes.
void set_forced_mode(Mode m);
Mode forced_mode();
// mode_count: ops dispatched in mode m so far (kNone: ops without a mode), for reports.
uint64_t mode_count(Mode m);
void note_mode(Mode m);

// zeros_like: zeros of t's global shape, held like t (optimizer state of a sharded
// parameter is sharded the same way).
Tensor zeros_like(const Tensor& t, bool persistent);

// GradReducer: after the backward, a parameter held Replicated has on each rank the
// gradient of that rank's part of the loss; the reducer sums them over the group with
// data parallel's buckets (overlapping the backward). Sharded parameters' gradients are
// complete on their rank (the collectives' backward rules brought the rest). Use:
// loss.backward(); reducer->finish(); opt.step().
class GradReducer {
 public:
  static absl::StatusOr<std::unique_ptr<GradReducer>> create(nn::Module& net, const Group& g, size_t bucket_bytes);
  void finish();
  int replicated_parameters() const { return replicated_; }
  // data_parallel: the buckets (null when nothing is replicated or the group is one rank).
  dist::DataParallel* data_parallel() const { return dp_.get(); }
 private:
  std::unique_ptr<dist::DataParallel> dp_;
  int replicated_ = 0;
};

// StateBytes: this rank's bytes of training state: parameters, their gradients and the
// optimizer's state, for the per-mode memory table.
struct StateBytes {
  size_t parameters = 0, gradients = 0;
};
StateBytes state_bytes(nn::Module& net);

}  // namespace mtc::dtp
