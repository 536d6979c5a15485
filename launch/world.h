// World: where this process stands in the job: its rank, the number of ranks, its rank
// on this node, and the GPU that rank uses. Read from the launcher's environment, so the
// tools know it before any communicator exists.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace mtc::launch {

struct World {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  std::string launcher = "none";  // "mpirun", "torchrun" or "none"
};

// world_from_environment: Open MPI's variables (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
// _LOCAL_SIZE) when present, else torchrun's (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE), else one rank. A value that is not a whole number in range (RANK=x,
// RANK >= WORLD_SIZE, a size < 1) is InvalidArgument naming the variable and its value.
absl::StatusOr<World> world_from_environment();

// device_for: the GPU ordinal a rank uses: its local rank modulo the GPUs it can see.
// CUDA_VISIBLE_DEVICES is honoured by the CUDA runtime itself: ordinals count only the
// visible GPUs, so ordinal k is the k-th listed there.
int device_for(const World& w, int visible_devices);

// per_rank_path: the file a rank writes when every rank is given the same name: "%r" in
// `path` is replaced by the rank; without one, a job of more than one rank appends
// ".rank<R>" (trace.jsonl -> trace.jsonl.rank1), and a lone rank writes `path` itself.
std::string per_rank_path(const std::string& path, const World& w);

// describe: "rank 2 of 4 (local 2 of 4, mpirun)".
std::string describe(const World& w);

}  // namespace mtc::launch
