// TensorRecord: the worker's record of one tensor, and ComputePath, the op that made it.
// Both are owned by the interpreter's worker thread; nothing else touches them.
//
// A record carries what eviction (DTE) will need: where the storage is, the compute path
// that can regenerate it, its users, and access statistics.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "alloc/region.h"
#include "commands.h"

namespace mtc {

struct ComputePath {
  std::shared_ptr<const OpDef> op;
  IdList inputs;
  IdList outputs;
  double compute_us = 0;  // measured time of the op's last run, microseconds
};

enum class StorageState : uint8_t {
  kResident,  // in the compute region at `block`
  kMissing,   // never produced (its op failed), or its storage was dropped
};

struct TensorRecord {
  uint64_t id = 0;
  TensorDesc desc;
  StorageState state = StorageState::kMissing;
  alloc::Block block;                     // valid when kResident
  std::shared_ptr<ComputePath> producer;  // null for Put tensors
  std::vector<uint64_t> users;            // live tensors computed from it (DTE's graph)
  bool persistent = false;                // parameters and optimizer state: never evicted
  bool handle_alive = true;               // a user handle still names it
  // DTE statistics.
  uint64_t last_access = 0;  // the worker's op counter at its last use
  uint32_t recompute_count = 0;

  // ref_count: what still needs this tensor: the user's handle (all copies of a Tensor
  // share one TensorRef, so the worker sees at most one) and every live tensor computed
  // from it, which may need it again as a recompute source. Derived, never stored.
  size_t ref_count() const { return (handle_alive ? 1 : 0) + users.size(); }
};

}  // namespace mtc
