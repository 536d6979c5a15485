// TensorRecord: the runtime's record of one tensor, ComputePath, the op that made it, and
// Pins, which hold records resident while an op runs. The records are kept by DTE's
// engine (evict/engine.h) and read by the executor; both run on the interpreter's worker
// thread, and nothing else touches them.
//
// A record carries what eviction (DTE) needs: where the storage is (resident in the
// compute region, swapped to a host buffer, or dropped and recomputable from its compute
// path), the compute path, its users, pins, a version for in-place mutation, and access
// statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "alloc/region.h"
#include "mtc/tensor.h"

namespace mtc {

class OpDef;  // src/op_def.h: the engine only keeps it; the executor runs it
namespace evict {
class Host;  // evict/engine.h
}

// HostBytes: host memory holding a swapped tensor's bytes, from Host::alloc_host (pinned
// on a GPU) and returned to the same Host by free_host.
struct HostBytesFree {
  evict::Host* host = nullptr;
  void operator()(std::byte* p) const;  // evict/engine.cc
};
using HostBytes = std::unique_ptr<std::byte[], HostBytesFree>;

struct ComputePath {
  std::shared_ptr<const OpDef> op;
  absl::InlinedVector<uint64_t, 4> inputs;          // ids (commands.h's IdList)
  absl::InlinedVector<uint32_t, 4> input_versions;  // each input's version when it ran
  absl::InlinedVector<uint64_t, 4> outputs;
  double compute_us = 0;  // measured time of the op's last run, microseconds
};

enum class StorageState : uint8_t {
  kResident,  // in the compute region at `block`
  kSwapped,   // in `host`, a host buffer; swapped in before use
  kDropped,   // no storage; regenerated from `producer` before use
  kMissing,   // never produced (its op failed)
};

struct TensorRecord {
  uint64_t id = 0;
  TensorDesc desc;
  StorageState state = StorageState::kMissing;
  alloc::Block block;                     // valid when kResident
  bool in_comm = false;                   // block is in the comm/gradient region (m1)
  HostBytes host;                         // valid when kSwapped
  std::shared_ptr<ComputePath> producer;  // null for Put tensors
  std::vector<uint64_t> users;            // live tensors computed from it (DTE's graph)
  bool persistent = false;                // parameters and optimizer state: never evicted
  bool recomputable = true;               // may be dropped (false: made by the backward pass)
  bool handle_alive = true;               // a user handle still names it
  uint32_t pin_count = 0;                 // > 0 while an op being run needs it resident
  uint32_t address_holds = 0;             // > 0 while work in flight uses its bytes: never moved
  uint32_t version = 0;                   // bumped by each in-place mutation
  size_t candidate_index = SIZE_MAX;      // its place in the engine's candidate list
  // DTE statistics.
  uint64_t last_access = 0;  // the worker's op counter at its last use
  uint32_t recompute_count = 0;
  // Note [Recompute cycles] (evict/engine.cc): the op counter at its last recompute and how
  // often it was recomputed for that op; from the second time it is kept for that op.
  uint64_t recomputed_for = UINT64_MAX;
  uint32_t recomputes_for_op = 0;

  // ref_count: what still needs this tensor: the user's handle (all copies of a Tensor
  // share one TensorRef, so the worker sees at most one) and every live tensor computed
  // from it, which may need it again as a recompute source. Derived, never stored.
  size_t ref_count() const { return (handle_alive ? 1 : 0) + users.size(); }
};

// PinnedBytes: the bytes of the resident tensors that are pinned, now and at most (the
// engine keeps one; the out-of-memory message and mtc-replay read it).
struct PinnedBytes {
  size_t now = 0, peak = 0;
  void add(size_t b) {
    now += b;
    if (now > peak) peak = now;
  }
  void sub(size_t b) { now -= b; }
};

// Pins: pins records for the life of an op's run, unpinning on every path out. A record
// resident when its first pin comes (or made resident while pinned: the engine sees to
// that) counts in `bytes` until its last pin goes.
class Pins {
 public:
  explicit Pins(PinnedBytes& bytes) : bytes_(bytes) {}
  Pins(const Pins&) = delete;
  Pins& operator=(const Pins&) = delete;
  ~Pins() {
    for (TensorRecord* r : pinned_) {
      if (--r->pin_count == 0 && r->state == StorageState::kResident) bytes_.sub(r->block.size);
    }
  }
  void add(TensorRecord* r) {
    if (r->pin_count++ == 0 && r->state == StorageState::kResident) bytes_.add(r->block.size);
    pinned_.push_back(r);
  }
 private:
  PinnedBytes& bytes_;
  absl::InlinedVector<TensorRecord*, 4> pinned_;
};

}  // namespace mtc
