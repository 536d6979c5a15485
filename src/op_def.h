// OpDef: what every op declares, and the kernel table its kernels register into.
//
// An op type derives from OpDef and declares, in one place: shape inference, a cost
// estimate, its backward rule (written with ops, so gradients also flow through the
// interpreter), which of its inputs and outputs the backward needs, and which inputs it
// mutates. Kernels live apart (src/kernels/<device>/) and register per device type into
// the op's schema: the interpreter looks up schema().kernels[device] and never names a
// device itself, so the CUDA kernels slot in beside the CPU ones.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "mtc/status.h"
#include "mtc/tensor.h"
#include "partition/placement.h"

namespace mtc {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;
const char* device_type_name(DeviceType t);

class OpDef;
class Device;
// ShardContext: the partition group an op runs in under DTP (src/dist/dtp.h).
struct ShardContext;

// TensorView: a tensor's data as a kernel sees it.
struct TensorView {
  void* data = nullptr;
  const TensorDesc* desc = nullptr;
  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
  const Shape& shape() const { return desc->shape; }
  int64_t dim(int i) const { return desc->shape[i < 0 ? i + desc->shape.size() : i]; }
  int ndim() const { return static_cast<int>(desc->shape.size()); }
  int64_t numel() const { return desc->numel(); }
  size_t bytes() const { return desc->bytes(); }
};

// KernelContext: what a kernel may use besides its tensors.
class KernelContext {
 public:
  virtual ~KernelContext() = default;
  // scratch: device memory valid until the kernel returns, carved from the compute region.
  virtual absl::StatusOr<void*> scratch(size_t bytes) = 0;
  virtual Device& device() = 0;
  // recomputing: the op runs again to regenerate an evicted output (DTE). A kernel that
  // mutates inputs must then leave them alone; its outputs must come out bit-identical.
  virtual bool recomputing() const { return false; }
  // comm_span: a collective this op issued ran on its communicator's queue from `start`
  // to `end` (steady clock), `bytes` of this rank's data; the Chrome trace's comm track.
  virtual void comm_span(const char* name, size_t bytes, std::chrono::steady_clock::time_point start,
                         std::chrono::steady_clock::time_point end) {}
};

struct KernelArgs {
  std::span<const TensorView> in;
  std::span<const TensorView> out;
  KernelContext& ctx;
};

using KernelFn = absl::Status (*)(const OpDef& op, const KernelArgs& args);

// OpSchema: one per op type; its name and its kernel per device type.
struct OpSchema {
  explicit OpSchema(const char* n);
  // unlisted: a schema kept out of all_op_schemas() (ops replayed from a trace).
  struct Unlisted {};
  OpSchema(const char* n, Unlisted) : name(n) {}
  const char* name;  // a string literal
  KernelFn kernels[kNumDeviceTypes] = {};
};
// all_op_schemas: every op type whose schema has been created (for tools and tests).
std::vector<const OpSchema*> all_op_schemas();

// OpCost: an estimate for the cost models (DTP) and the eviction heuristics.
struct OpCost {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
};

// BackwardArgs: what a backward rule gets. inputs/outputs hold only what the op asked
// to save (undefined otherwise); grad_outputs are undefined where no gradient flows.
struct BackwardArgs {
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;
  std::span<const Tensor> grad_outputs;
  std::span<const TensorDesc> input_descs;
  std::span<const TensorDesc> output_descs;
  std::span<const bool> needs_input_grad;
};

class OpDef {
 public:
  virtual ~OpDef() = default;
  virtual const OpSchema& schema() const = 0;
  const char* name() const { return schema().name; }

  // infer: output descriptions from input descriptions, or InvalidArgument naming what
  // was wrong and what was expected (the interpreter prefixes the op and input shapes).
  virtual absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const = 0;
  // cost: the default counts every byte in and out, and flops_per_element() flops for
  // each element of the largest tensor among inputs and outputs (so a reduction counts
  // its input, a broadcast its output). Ops with real arithmetic structure (conv,
  // matmul, norms) override it.
  virtual OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const;
  // flops_per_element: for the default cost; 0 for pure data movement.
  virtual double flops_per_element() const { return 1; }
  // backward: input gradients (undefined where none), built from ops. The default says
  // the op is not differentiable.
  virtual absl::StatusOr<TensorList> backward(const BackwardArgs& args) const;
  virtual bool differentiable() const { return true; }
  // recomputable: DTE may drop the op's outputs and run the op again to regenerate them.
  // Collectives say no: a rerun on one rank would wait forever for the others, so their
  // outputs are only ever swapped.
  virtual bool recomputable() const { return true; }
  // num_outputs: how many outputs the op makes (known before infer runs).
  virtual int num_outputs() const { return 1; }
  // Bit masks over input / output indexes: what backward needs saved.
  virtual uint64_t saves_inputs() const { return ~uint64_t{0}; }
  virtual uint64_t saves_outputs() const { return 0; }
  // mutates_inputs: inputs the kernel writes in place (optimizer state, running stats).
  // Such an op's outputs must not depend on the mutated inputs' old values (batch_norm in
  // training reads only x, gamma and beta for y), and its kernel must skip the mutation
  // when recomputing(), so that DTE can regenerate its outputs.
  virtual uint64_t mutates_inputs() const { return 0; }
  // holds_inputs: inputs whose bytes work the op starts keeps reading or writing after the
  // op returns (a data-parallel bucket's all-reduce); each stays at its address, which
  // compaction would otherwise change, until an op that releases_inputs() it has run.
  virtual uint64_t holds_inputs() const { return 0; }
  virtual uint64_t releases_inputs() const { return 0; }
  // attrs: the op's attributes for messages and traces, e.g. "stride=1 padding=1".
  virtual std::string attrs() const { return ""; }
  // recorded_us: for an op replayed from a trace (mtc-replay), the time it took when the
  // trace was recorded; a simulating executor charges it instead of running a kernel.
  virtual double recorded_us() const { return -1; }
  // recorded_scratch: the scratch requests the op's kernel made then, in bytes.
  virtual std::span<const size_t> recorded_scratch() const { return {}; }

  // ---- DTP (docs/dtp.md) ----
  // signatures: the placement signatures the op accepts for these global input
  // descriptions on a group of `parts` ranks, with the output placements each gives
  // (OneFlow's SBP signatures; the contract is partition/placement.h's). Some depend on
  // parts: a dimension smaller than parts gets no split, a reshape keeps a split only
  // where every rank's shard maps onto a standard shard. parts == 0: any group size (only
  // the signatures exact for every p). The default is the one that fits every op: every
  // input and output Replicated (each rank computes the whole op). Each op's table sits
  // next to its definition; the builders they share are in src/ops/sbp.h.
  virtual void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const;
  // shard_op: the op a rank runs on its shards under signature s, when it differs from
  // this one (attributes that name a global size, such as reshape's target shape or a
  // loss's divisor); null to run this op unchanged. `in` are the global descriptions.
  virtual std::shared_ptr<const OpDef> shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                                const ShardContext& g) const {
    return nullptr;
  }
  // shard_run: for a signature whose local computation is more than one op (batch norm
  // over a split batch: local statistics, their all_reduce, the normalisation), runs it
  // on this rank's local inputs through autograd and returns the local outputs;
  // std::nullopt (the default) to run shard_op (or this op) instead.
  virtual std::optional<TensorList> shard_run(const partition::Signature& s, std::span<const TensorDesc> in,
                                              std::span<const Tensor> local_in, const ShardContext& g) const {
    return std::nullopt;
  }
};

// MTC_OP_SCHEMA("name"): declares an op type's schema inside its class.
#define MTC_OP_SCHEMA(op_name)                                          \
  static ::mtc::OpSchema& static_schema() {                             \
    static ::mtc::OpSchema s(op_name);                                  \
    return s;                                                           \
  }                                                                     \
  const ::mtc::OpSchema& schema() const override { return static_schema(); }

// MTC_REGISTER_KERNEL(OpType, DeviceType::kCPU, fn): fn is
// absl::Status fn(const OpType&, const KernelArgs&).
#define MTC_REGISTER_KERNEL(OpType, device, fn)                                          \
  static const bool MTC_CONCAT(mtc_kernel_registered_, __LINE__) = [] {                   \
    OpType::static_schema().kernels[static_cast<int>(device)] =                          \
        [](const ::mtc::OpDef& op, const ::mtc::KernelArgs& a) -> absl::Status {         \
      return fn(static_cast<const OpType&>(op), a);                                      \
    };                                                                                   \
    return true;                                                                         \
  }()

// op_context: "conv2d(stride=1 padding=1) on f32[64,3,32,32], f32[16,3,3,3]", for messages.
std::string op_context(const OpDef& op, std::span<const TensorDesc> in);

}  // namespace mtc
