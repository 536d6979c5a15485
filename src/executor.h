// Executor: the interpreter's worker side. It owns the tensor records and executes
// commands against the device: allocates outputs in the compute region, runs kernels from
// the op's kernel table, times them and records compute paths. Only the worker thread
// (or, in synchronous mode, the thread holding the interpreter's sync lock) touches it.
#pragma once

#include <memory>

#include "absl/container/node_hash_map.h"
#include "commands.h"
#include "device.h"
#include "tensor_record.h"

namespace mtc {

class Executor {
 public:
  explicit Executor(Device& device) : device_(device) {}
  ~Executor();

  absl::Status execute(Put& c);
  absl::Status execute(ApplyOp& c);
  absl::Status execute(Del& c);
  absl::Status execute(GetValue& c);

  Device& device() { return device_; }
  const absl::node_hash_map<uint64_t, TensorRecord>& records() const { return records_; }
  uint64_t op_clock() const { return op_clock_; }

 private:
  absl::Status release_storage(TensorRecord& r);

  Device& device_;
  absl::node_hash_map<uint64_t, TensorRecord> records_;
  uint64_t op_clock_ = 0;  // ApplyOps executed so far: the staleness clock
};

}  // namespace mtc
