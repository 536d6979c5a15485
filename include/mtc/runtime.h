// Runtime: a device, its arena and the interpreter that runs on it, for one rank.
// Ops that take no tensor inputs (zeros, from_vector, ...) run on the current runtime:
// the one created last, or the one made current.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mtc/interpreter.h"

namespace mtc {

enum class DeviceType : uint8_t;
class Device;

struct RuntimeOptions {
  std::string device = "cpu";  // cpu | cuda
  int device_ordinal = 0;
  // memory_bytes: the arena, m = m1 + m2. 0 picks a default: a quarter of physical memory
  // on the CPU (capped at 16 GiB), 90% of free device memory on a GPU.
  size_t memory_bytes = 0;
  // comm_bytes: m1, the comm/gradient region. 0 picks 1/16 of the arena.
  size_t comm_bytes = 0;
  int num_threads = 0;  // CPU kernel threads; 0: OMP_NUM_THREADS, else all cores
  bool synchronous = false;
  uint64_t seed = 0;  // seeds random ops (dropout) and parameter initialisation
  // DTE. evict.budget_bytes is m* in bytes; budget_fraction, when > 0, sets it instead as a
  // fraction of the compute region once the region's size is known.
  EvictOptions evict;
  double budget_fraction = 0;
  // trace_path: record the executed op stream there (docs/trace-format.md); empty: none.
  std::string trace_path;
  TmaConfig tma;  // planned offsets for transient tensors (docs/tma.md)
};

class Runtime {
 public:
  static absl::StatusOr<std::unique_ptr<Runtime>> create(const RuntimeOptions& opts);
  ~Runtime();

  Interpreter& interpreter() { return *interp_; }
  const std::shared_ptr<Interpreter>& interpreter_ptr() { return interp_; }
  Device& device();
  const RuntimeOptions& options() const { return opts_; }

  // current: the runtime for ops without tensor inputs. Aborts if none exists.
  static Runtime& current();
  void make_current();
  // next_seed: a fresh seed for one random op, from a counter-based stream of opts.seed.
  uint64_t next_seed();

 private:
  explicit Runtime(const RuntimeOptions& o) : opts_(o) {}
  RuntimeOptions opts_;
  std::shared_ptr<Device> device_;
  std::shared_ptr<Interpreter> interp_;
  std::atomic<uint64_t> seed_counter_{0};
};

// parse_bytes: "512MiB", "2GiB", "1.5G", "1000000" -> bytes; an error names the text.
absl::StatusOr<size_t> parse_bytes(const std::string& text);

}  // namespace mtc
