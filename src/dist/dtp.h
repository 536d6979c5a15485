// DTP's dispatch: global tensors (a placement over a partition group and a global shape
// on the handle, the rank's shard in the interpreter), the conversion of an op's inputs
// to the placements of the signature chosen for it, and the op run on the shards. The
// choice itself is partition/'s; this file is where it meets tensors and collectives.
#pragma once

#include <memory>

#include "mtc/distributed.h"
#include "partition/placement.h"

namespace mtc {

// ShardContext: the partition group an op runs in: its size, this rank's index and the
// communicator of the group.
struct ShardContext {
  int parts = 1;
  int index = 0;
  dist::CommPtr comm;
};

}  // namespace mtc
