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
struct ShardContext {
  int parts = 1;
  int index = 0;
  dist::CommPtr comm;
  bool check = false;  // --comm_check: the ranks compare each dispatch's placements
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
// gather: t held Replicated (a conversion if it is not): what to_vector reads. Collective.
Tensor gather(const Tensor& t);

}  // namespace dtp
}  // namespace mtc
