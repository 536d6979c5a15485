// Commands: what user threads send the interpreter's worker. Plain structs in a variant
// that can name and print themselves, so logging and tracing come free.
#pragma once

#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "mtc/tensor.h"
#include "op_def.h"

namespace mtc {

using IdList = absl::InlinedVector<uint64_t, 4>;

// Put: host data into a new tensor.
struct Put {
  uint64_t id;
  TensorDesc desc;
  std::vector<std::byte> data;
  bool persistent;
};
// ApplyOp: run op on inputs into new outputs (descs inferred on the user thread).
struct ApplyOp {
  std::shared_ptr<const OpDef> op;
  IdList inputs;
  IdList outputs;
  absl::InlinedVector<TensorDesc, 2> output_descs;
  bool recomputable = true;  // false for ops of the backward pass
};
// Del: the user dropped the last handle to a tensor.
struct Del {
  uint64_t id;
};
// MakeGradient: tensor `id` is now a parameter's gradient. It moves to the comm/gradient
// region (m1) when it fits there, is never evicted, and stops being recomputable: its
// compute path is cut, so the backward graph behind it can be freed.
struct MakeGradient {
  uint64_t id;
};
// Mark: a program boundary ("iteration", "forward", "backward", "step") for traces.
struct Mark {
  std::string label;
  int64_t index;
};
// GetValue: copy a tensor to host memory; completes `done` (synchronising).
struct GetValue {
  uint64_t id;
  void* dst;
  size_t bytes;
  std::promise<absl::Status>* done;
};
// Sync: completes `done` once every earlier command has run.
struct Sync {
  std::promise<absl::Status>* done;
};
// Inspect: runs fn on the worker (reads worker-owned state: statistics), then completes
// `done` like Sync.
class Executor;
struct Inspect {
  std::function<void(Executor&)> fn;
  std::promise<absl::Status>* done;
};

struct Command {
  std::variant<Put, ApplyOp, Del, MakeGradient, Mark, GetValue, Sync, Inspect> v;
  std::string str() const;  // "ApplyOp conv2d(3,4) -> (5)"
};

}  // namespace mtc
