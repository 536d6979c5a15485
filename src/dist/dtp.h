// DTP's dispatch: global tensors (a placement over a partition group and a global shape
// on the handle, the rank's shard in the interpreter), the conversion of an op's inputs
// to the placements of the signature chosen for it, and the op run on the shards. The
// choice itself is partition/'s; this file is where it meets tensors and collectives.
// The user's API is include/mtc/dtp.h; docs/dtp.md explains both.
#pragma once

#include <memory>
#include <span>

#include "mtc/distributed.h"
#include "mtc/dtp.h"
#include "op_def.h"
#include "partition/placement.h"

namespace mtc {

// ShardContext: the partition group an op runs in: its size, this rank's index and the
// communicator of the group.
namespace dtp {
class Planner;
}

struct ShardContext {
  int parts = 1;
  int index = 0;
  dist::CommPtr comm;
  bool check = false;  // --comm_check: the ranks compare each dispatch's placements
  // batch norm over a split batch normalises each rank's rows by their own statistics
  // (dtp::BatchNormStats::kShard, the default); false: the whole batch's (--sync_bn)
  bool shard_bn_stats = true;
  mutable std::shared_ptr<dtp::Planner> planner;  // --dtp=auto or --dtp_report (dtp_auto.h)
};

// DistInfo: a global handle's placement, the handle of this rank's shard, its group, and
// for stored tensors (parameters, buffers) how they may move: never by a conversion of
// the dispatch; a P2 parameter is gathered (S(0) -> R) for each use.
struct DistInfo {
  partition::Placement placement;
  std::shared_ptr<TensorRef> local;
  dtp::Group group;
  bool stored = false;  // a parameter or buffer: never converted by the dispatch
  bool gather = false;  // P2: stored S(0), all_gathered for each use
  bool unsettled = false;  // --dtp=auto: not yet placed by a decision (stored S(0) or R meanwhile)
  // The optimizer state made for a stored tensor (zeros_like): moved with it.
  std::vector<std::weak_ptr<TensorRef>> followers;
};

namespace dtp {

// local: this rank's shard of t (t itself when t is not global), with t's autograd meta.
Tensor local(const Tensor& t);
// placement: t's placement; a tensor that is not global counts as Replicated.
partition::Placement placement(const Tensor& t);
// wrap: the global handle of a tensor of global description `global` of which `local`
// is this rank's part under placement p.
Tensor wrap(const Tensor& local, const TensorDesc& global, partition::Placement p, const Group& g);
// any_global: whether some input is a global handle (then call() dispatches).
bool any_global(std::span<const Tensor> inputs);
// dispatch: op on global inputs: chooses a signature, converts the inputs, runs the op on
// the shards (recorded by autograd), returns global outputs. A failure poisons the
// outputs and surfaces at the next synchronising call, as the interpreter's do.
TensorList dispatch(std::shared_ptr<const OpDef> op, std::span<const Tensor> inputs);
// restore: replaces the storage behind t's handle (a stored global tensor, or one not yet
// global) by this rank's part of it at placement `to`, persistent; the handle (shared with
// the module and the optimizer) keeps its identity. Collective when a conversion is needed.
absl::Status restore(Tensor& t, partition::Placement to, bool gather, bool unsettled, const Group& g);
// gather: t held Replicated (a conversion if it is not): what to_vector reads. Collective.
Tensor gather(const Tensor& t);

}  // namespace dtp
}  // namespace mtc
