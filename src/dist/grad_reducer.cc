// DTP's gradient reduction (include/mtc/dtp.h, GradReducer): the Replicated parameters'
// gradients summed over the partition group with data parallel's buckets, or, over a
// mesh of G groups, summed over every rank and divided by G while the sharded
// parameters' shards are averaged across the groups; the buckets made again when the
// parameters' placements change (refresh); and the per-rank training-state figures.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "dist/dtp.h"

namespace mtc::dtp {

namespace {

// LayoutEntry: one parameter as the buckets were made for it: the handle, the shard's
// handle (which a new placement replaces), the autograd meta the hooks sit on, the
// placement and whether it is gathered per use.
struct LayoutEntry {
  const TensorRef* ref = nullptr;
  const TensorRef* local = nullptr;
  const AutogradMeta* meta = nullptr;
  Placement placement;
  bool gather = false;
  bool operator==(const LayoutEntry& o) const {
    return ref == o.ref && local == o.local && meta == o.meta && placement == o.placement && gather == o.gather;
  }
};

std::vector<LayoutEntry> layout_of(nn::Module& net) {
  std::vector<LayoutEntry> l;
  for (const Tensor& p : net.parameters()) {
    LayoutEntry e;
    e.ref = p.ref().get();
    e.local = p.global() ? p.ref()->dist->local.get() : e.ref;
    e.meta = p.meta().get();
    e.placement = placement(p);
    e.gather = p.global() && p.ref()->dist->gather;
    l.push_back(e);
  }
  return l;
}

}  // namespace

// Layout: what the buckets were made for, one entry per parameter in the module's order.
struct GradReducer::Layout {
  std::vector<LayoutEntry> entries;
};

GradReducer::~GradReducer() = default;

absl::StatusOr<std::unique_ptr<GradReducer>> GradReducer::create(nn::Module& net, const Group& g, size_t bucket_bytes) {
  if (g == nullptr) return absl::InvalidArgumentError("GradReducer: no partition group");
  auto r = std::unique_ptr<GradReducer>(new GradReducer());
  r->replicated_comm_ = g->comm;
  r->groups_ = 1;
  r->bucket_bytes_ = bucket_bytes;
  MTC_RETURN_IF_ERROR(r->build(net));
  return r;
}

absl::StatusOr<std::unique_ptr<GradReducer>> GradReducer::create(nn::Module& net, const Mesh& m, size_t bucket_bytes) {
  if (m.group == nullptr || m.world == nullptr || m.across == nullptr) {
    return absl::InvalidArgumentError("GradReducer: the mesh has no group, world or across communicator (use make_mesh)");
  }
  if (m.groups < 1 || m.across->world_size() != m.groups || m.world->world_size() != m.groups * m.group->parts) {
    return absl::InvalidArgumentError(absl::StrCat("GradReducer: a mesh of ", m.groups, " groups of ", m.group->parts,
                                                   " ranks, with ", m.world->world_size(), " ranks in all and ",
                                                   m.across->world_size(), " across groups: expected groups x ranks"));
  }
  auto r = std::unique_ptr<GradReducer>(new GradReducer());
  r->replicated_comm_ = m.world;
  r->groups_ = m.groups;
  if (m.groups > 1) r->across_comm_ = m.across;
  r->bucket_bytes_ = bucket_bytes;
  MTC_RETURN_IF_ERROR(r->build(net));
  return r;
}

// build: the buckets for the parameters as they are placed now. Each parameter goes to
// exactly one DataParallel (a parameter has one grad_ready hook), which sees its shard
// (dtp::local: this rank's storage and gradient, with the parameter's autograd meta).
absl::Status GradReducer::build(nn::Module& net) {
  TensorList replicated, sharded;
  for (const Tensor& p : net.parameters()) {
    if (!p.global() || placement(p).replicated()) {
      replicated.push_back(local(p));
    } else if (across_comm_ != nullptr && local(p).numel() > 0) {
      // The same shard on every rank of `across` (its index in the group is the same).
      sharded.push_back(local(p));
    }
  }
  replicated_ = static_cast<int>(replicated.size());
  sharded_ = static_cast<int>(sharded.size());
  if (!replicated.empty() && replicated_comm_ != nullptr && replicated_comm_->world_size() > 1) {
    MTC_ASSIGN_OR_RETURN(dp_, dist::DataParallel::create(std::move(replicated), replicated_comm_,
                                                         {.bucket_bytes = bucket_bytes_,
                                                          .broadcast_parameters = false,
                                                          .reduce = dist::Reduce::kSum,
                                                          .scale = 1.f / static_cast<float>(groups_),
                                                          .local = {}}));
  }
  if (!sharded.empty()) {
    MTC_ASSIGN_OR_RETURN(across_dp_, dist::DataParallel::create(std::move(sharded), across_comm_,
                                                                {.bucket_bytes = bucket_bytes_,
                                                                 .broadcast_parameters = false,
                                                                 .reduce = dist::Reduce::kAvg,
                                                                 .scale = 1.f,
                                                                 .local = {}}));
  }
  layout_ = std::make_unique<Layout>(Layout{layout_of(net)});
  return absl::OkStatus();
}

namespace {

// add_counters: from's counters and times into `into` (not its buckets and bucket_bytes,
// which describe one set of buckets).
void add_counters(dist::DataParallelFigures& into, const dist::DataParallelFigures& from) {
  into.reductions += from.reductions;
  into.comm_sec += from.comm_sec;
  into.exposed_sec += from.exposed_sec;
  into.bucket_copy_sec += from.bucket_copy_sec;
  into.reduced_bytes += from.reduced_bytes;
}

}  // namespace

absl::Status GradReducer::refresh(nn::Module& net) {
  if (layout_ != nullptr && layout_of(net) == layout_->entries) return absl::OkStatus();
  // The old buckets' figures stay counted (figures()).
  if (dp_) {
    MTC_ASSIGN_OR_RETURN(dist::DataParallelFigures f, dp_->figures());
    add_counters(retired_, f);
  }
  // The old buckets go first: their destructors clear the grad_ready hooks the new ones set.
  dp_.reset();
  across_dp_.reset();
  layout_.reset();
  ++rebuilds_;
  return build(net);
}

absl::StatusOr<dist::DataParallelFigures> GradReducer::figures() {
  dist::DataParallelFigures f;
  if (dp_) {
    MTC_ASSIGN_OR_RETURN(f, dp_->figures());
  }
  add_counters(f, retired_);
  return f;
}

void GradReducer::finish() {
  if (dp_) dp_->finish();
  if (across_dp_) across_dp_->finish();
}

StateBytes state_bytes(nn::Module& net) {
  StateBytes b;
  for (const Tensor& p : net.parameters()) {
    b.parameters += local(p).desc().bytes();
    if (Tensor gr = p.grad(); gr.defined()) b.gradients += local(gr).desc().bytes();
  }
  return b;
}

}  // namespace mtc::dtp
