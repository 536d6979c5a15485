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
#include "partition/cost.h"
#include "partition/placement.h"

namespace mtc {
struct ShardContext;
}

namespace mtc::dtp {

using partition::Mode;
using partition::Placement;
using Group = std::shared_ptr<const ShardContext>;

// BatchNormStats: what batch norm in training normalises a batch split across the
// group's ranks by. kShard (the default): the rows each rank holds, by their own
// statistics, as data parallel without --sync_bn and PyTorch's DistributedDataParallel
// (no collective; the running statistics then differ across the ranks, as data
// parallel's do). Where an op's batch is not split (replicated, or split by channel)
// its rank holds every row and the two agree. kBatch (mtc-train --sync_bn): the whole
// global batch's statistics, as one device would (two small all-reduces per layer,
// forward and backward).
enum class BatchNormStats { kShard, kBatch };

// make_group: a partition group of every rank of c (check: compare the placements of
// every dispatched op across the ranks, naming the op on a mismatch; --comm_check).
Group make_group(dist::CommPtr c, bool check = false, BatchNormStats bn = BatchNormStats::kShard);
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

// ---- choosing at run time: --dtp=auto (docs/dtp.md, "Choosing at run time") ----

// AutoOptions: the planner's settings.
struct AutoOptions {
  bool choose = true;            // false: modes are forced (--dtp=pN); the planner fits and reports only
  double lambda = 0.1;           // weight of memory against time (--dtp_lambda; docs/dtp.md says why 0.1)
  double budget_bytes = 0;       // the rank's bytes for state and the op at hand (0: no limit)
  double grad_region_bytes = 0;  // of budget_bytes, the comm region that only gradients use
                                 // (0: one pool); the rest must hold everything else
  double state_bytes = 0;        // of the rest, what the stored state may hold (parameters,
                                 // optimizer state, buffers): under DTE the remainder is kept
                                 // for the working set it cannot evict (0: no cap of its own)
  double optimizer_states = 0;   // optimizer state per parameter element: 0, 1 (momentum), 2 (AdamW)
  double grad_bucket_bytes = 0;  // the gradient reducer's bucket (--bucket_size): a Replicated
                                 // parameter's all-reduce is priced as its share of a call
  std::string step_family;       // the optimizer step op's name ("adamw_step"), for its rates
  int warmup_iterations = 3;     // op times of iterations 2..warmup are fitted at its end
  bool count_activations = false;  // no eviction (mtc-train: --evict_policy=none): after the
                                   // fit, a decision may add to the bytes the warm-up's
                                   // decisions held only what the warm-up's measured peak
                                   // leaves of the compute region (docs/dtp.md, "The room")
  double activation_capacity_bytes = 0;  // with count_activations, the bytes the warm-up's peak
                                         // is taken from (0: the compute region's capacity;
                                         // less keeps that much more of it free)
  double horizon_iterations = 100;  // a settled parameter moves only when the time it saves
                                    // over this many iterations pays for the move
  bool report = false;           // --dtp_report: a table per new decision and in the summary
  std::FILE* report_to = nullptr;  // where rank 0 prints it (stdout when null)
  partition::CollectiveModel comm;  // the collectives' alpha-beta model
  dist::CommPtr world;           // rank 0's fitted rates go over it (default: the group's); a
                                 // mesh's groups must all decide alike
  partition::Rates initial_rates = partition::Rates::cpu_default();  // before the fit
};

// AutoFigures: what the planner has done.
struct AutoFigures {
  uint64_t decisions = 0;   // cache misses: decisions made (again after the fit)
  uint64_t hits = 0;        // cache hits
  uint64_t settled = 0;     // stored tensors placed by a first decision
  uint64_t moves = 0;       // stored tensors moved by a later one
  uint64_t shared_moves = 0;  // of which shared ones (a tied embedding), moved between iterations
  double decide_us = 0;     // time in decide(), misses and hits, microseconds
  double hit_us = 0;        // of which in cache hits (the lookup, key included)
  bool fitted = false;      // the rates were fitted to measured op times
  int families = 0;         // op families with their own fitted rates
  // AutoOptions::count_activations, after the fit: the compute region less the warm-up's
  // peak (negative: not counted), and what the decisions made since have added over the
  // warm-up's (their activations and buffers at each op's dispatches, and placed state).
  double activation_room_bytes = -1;
  double activation_added_bytes = 0;
};

// enable_auto: the planner for group g. With o.choose, net's parameters and buffers are
// placed unsettled (stored S(0) where dimension 0 has a row per rank, else R), and each
// settles at the placement the first decision of an op using it chooses. Call instead of
// shard() (o.choose) or after it (forced modes, for the fit and the report).
absl::Status enable_auto(nn::Module& net, const Group& g, AutoOptions o);
// end_iteration: call once per training iteration (after the optimizer step) on every
// rank: at the end of the warm-up, rank 0's fitted rates are broadcast and the decisions
// made again. Collective.
absl::Status end_iteration(const Group& g);
AutoFigures auto_figures(const Group& g);
// auto_summary: the report's summary table (every decision, with its measured time).
std::string auto_summary(const Group& g);

struct Mesh;  // below: partition groups with data parallel across them

// GradReducer: after the backward, a parameter held Replicated has on each rank the
// gradient of that rank's part of the loss; the reducer sums them over the group with
// data parallel's buckets (overlapping the backward). Sharded parameters' gradients are
// complete on their rank (the collectives' backward rules brought the rest). Use:
// loss.backward(); reducer->finish(); opt.step().
// Over a Mesh of G groups every gradient ends as the average over the groups of each
// group's whole gradient: a Replicated parameter's shares are summed over every rank of
// the mesh and divided by G, a sharded parameter's shard is averaged with the same shard
// of the other groups (over Mesh::across).
class GradReducer {
 public:
  static absl::StatusOr<std::unique_ptr<GradReducer>> create(nn::Module& net, const Group& g, size_t bucket_bytes);
  static absl::StatusOr<std::unique_ptr<GradReducer>> create(nn::Module& net, const Mesh& m, size_t bucket_bytes);
  ~GradReducer();
  void finish();
  // refresh: after parameters were placed anew (run-time placement decisions), makes the
  // buckets again when the parameters or their placements differ from those the buckets
  // were made for, and does nothing (one pass over the parameters) when they are the
  // same. Call between iterations (after finish()), on every rank alike.
  absl::Status refresh(nn::Module& net);
  int replicated_parameters() const { return replicated_; }
  // sharded_parameters: those averaged across groups (0 without a mesh of several groups).
  int sharded_parameters() const { return sharded_; }
  // rebuilds: how many times refresh() made the buckets again.
  int rebuilds() const { return rebuilds_; }
  // data_parallel: the replicated parameters' buckets (null when nothing is replicated or
  // the mesh is one rank); across_groups: the sharded parameters' (null without groups).
  dist::DataParallel* data_parallel() const { return dp_.get(); }
  dist::DataParallel* across_groups() const { return across_dp_.get(); }
  // figures: data_parallel()'s figures over the reducer's life: the counters and times of
  // the buckets refresh() replaced are added in; buckets and bucket_bytes are the current
  // ones. Zero when nothing is replicated. Synchronises.
  absl::StatusOr<dist::DataParallelFigures> figures();

 private:
  struct Layout;
  GradReducer() = default;
  absl::Status build(nn::Module& net);
  std::unique_ptr<dist::DataParallel> dp_, across_dp_;
  int replicated_ = 0, sharded_ = 0, rebuilds_ = 0;
  dist::CommPtr replicated_comm_, across_comm_;  // sum over every rank; average across groups
  int groups_ = 1;
  size_t bucket_bytes_ = 0;
  std::unique_ptr<Layout> layout_;  // the parameters and placements the buckets were made for
  dist::DataParallelFigures retired_;  // the replaced buckets' counters and times (figures())
};

// StateBytes: this rank's bytes of training state: parameters, their gradients and the
// optimizer's state, for the per-mode memory table.
struct StateBytes {
  size_t parameters = 0, gradients = 0;
};
StateBytes state_bytes(nn::Module& net);

// ---- Mesh: partition groups of t ranks, data parallel across them (src/dist/mesh.cc) ----

// Mesh: N ranks as N/t partition groups of t contiguous ranks (group g: ranks g*t to
// g*t+t-1), each partitioning the model as one Group does, with data parallel across
// the groups: `across` joins the ranks holding the same index in every group (ranks i,
// t+i, 2t+i, ...), ordered by group. Each group takes its own part of the global batch
// (rows of group `group_index` of `groups`), split again within the group.
struct Mesh {
  Group group;           // this rank's partition group (t ranks)
  dist::CommPtr world;   // every rank of the mesh
  dist::CommPtr across;  // data parallel: one rank per group, ranked by group_index
  int groups = 1;        // G = N / t
  int group_index = 0;   // this rank's group, 0 .. G-1 (its rank in `across`)
};
// make_mesh: splits world (collective: every rank calls it alike) into groups of t.
// InvalidArgument when t < 1 or does not divide the world size: "--dtp_group=3: expected
// a divisor of the 4 ranks (1, 2, 4)". check, bn: as make_group's, within each group.
absl::StatusOr<Mesh> make_mesh(dist::CommPtr world, int t, bool check = false,
                               BatchNormStats bn = BatchNormStats::kShard);

}  // namespace mtc::dtp
