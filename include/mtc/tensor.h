// Tensor handles: what user code holds. A handle is cheap (two shared pointers): the
// record it names lives in the interpreter's worker, which frees the storage when the
// last handle to it goes (a Del command). Autograd metadata rides beside the data handle
// so that a tensor saved for backward can be held without its grad_fn (no cycles).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"

namespace mtc {

class Interpreter;
struct GradNode;

// DType: element types. fp32 is what every op computes in; i32 carries labels and indices.
enum class DType : uint8_t { kF32 = 0, kI32 = 1 };
size_t dtype_size(DType t);          // bytes per element
const char* dtype_name(DType t);     // "f32", "i32"

// Shape: dimensions, outermost first (NCHW for images).
using Shape = absl::InlinedVector<int64_t, 6>;
int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[64,16,32,32]"
// broadcast_strides: strides (in elements) for reading a row-major tensor of shape `in`
// as if it had shape `out` (right-aligned; broadcast dims get stride 0). For kernels.
Shape broadcast_strides(const Shape& in, const Shape& out);

// TensorDesc: what is known about a tensor without its data.
struct TensorDesc {
  Shape shape;
  DType dtype = DType::kF32;
  int64_t numel() const { return mtc::numel(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  std::string str() const;  // "f32[64,16,32,32]"
  bool operator==(const TensorDesc&) const = default;
};

// DistInfo: what makes a handle global under DTP (src/dist/dtp.h): its placement over a
// partition group and the handle of this rank's shard.
struct DistInfo;

// TensorRef: the data side of a handle. Its destructor tells the interpreter that this
// handle is gone (Del). Not for direct use. A global handle (dist set, DTP) holds the
// global description and the id of this rank's shard, whose own handle (in dist) is the
// one that deletes it.
struct TensorRef {
  uint64_t id = 0;                      // 0: poisoned (an earlier op failed; no record)
  TensorDesc desc;
  std::shared_ptr<Interpreter> interp;  // keeps the interpreter (and its device) alive
  std::shared_ptr<DistInfo> dist;       // set on a global handle only
  TensorRef(uint64_t i, TensorDesc d, std::shared_ptr<Interpreter> in)
      : id(i), desc(std::move(d)), interp(std::move(in)) {}
  TensorRef(const TensorRef&) = delete;
  TensorRef& operator=(const TensorRef&) = delete;
  ~TensorRef();
};

// AutogradMeta: whether a tensor takes part in autograd, the node that produced it, and
// (for leaves such as parameters) the accumulated gradient.
struct AutogradMeta;

// Tensor: a handle to one tensor of one interpreter. A default-constructed Tensor is
// undefined (defined() is false): it stands for "no tensor", e.g. a missing gradient.
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<TensorRef> ref, std::shared_ptr<AutogradMeta> meta = nullptr)
      : ref_(std::move(ref)), meta_(std::move(meta)) {}

  bool defined() const { return ref_ != nullptr; }
  uint64_t id() const { return ref_->id; }
  const TensorDesc& desc() const { return ref_->desc; }
  const Shape& shape() const { return ref_->desc.shape; }
  int64_t dim(int i) const;  // negative i counts from the end
  int ndim() const { return static_cast<int>(ref_->desc.shape.size()); }
  DType dtype() const { return ref_->desc.dtype; }
  int64_t numel() const { return ref_->desc.numel(); }
  Interpreter* interpreter() const { return ref_->interp.get(); }
  // poisoned: produced by an op that failed (or from a poisoned input); the failure
  // surfaces at the next synchronising call.
  bool poisoned() const { return ref_->id == 0; }

  // Host copies. Synchronise with the worker; an earlier failure surfaces here.
  absl::StatusOr<std::vector<float>> to_vector() const;
  absl::StatusOr<std::vector<int32_t>> to_vector_i32() const;
  absl::StatusOr<float> item() const;  // a one-element f32 tensor

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool r);  // makes this a leaf that accumulates .grad()
  Tensor grad() const;                 // accumulated gradient of a leaf; undefined if none
  void set_grad(Tensor g);             // replace (or with Tensor(), clear) the gradient
  Tensor detach() const { return Tensor(ref_); }
  // Backward from this tensor, a scalar loss (numel 1): gradients of every leaf that
  // requires grad are accumulated into grad().
  absl::Status backward() const;

  const std::shared_ptr<TensorRef>& ref() const { return ref_; }
  // global: a DTP handle, whose shape is the global one (docs/dtp.md).
  bool global() const { return ref_ != nullptr && ref_->dist != nullptr; }
  const std::shared_ptr<AutogradMeta>& meta() const { return meta_; }
  void set_meta(std::shared_ptr<AutogradMeta> m) { meta_ = std::move(m); }

 private:
  std::shared_ptr<TensorRef> ref_;
  std::shared_ptr<AutogradMeta> meta_;
};

using TensorList = std::vector<Tensor>;

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<GradNode> grad_fn;  // null for leaves
  int output_index = 0;               // which output of grad_fn this tensor is
  Tensor grad;                        // leaves only
  // grad_ready (leaves only): called during each backward pass as soon as this leaf's
  // gradient is complete, i.e. every op of the graph that read the leaf has passed its
  // gradient back (grad may then still be undefined, if none flowed). Data parallel
  // starts the gradient's all-reduce from it, overlapping the rest of the backward.
  std::function<void(AutogradMeta&)> grad_ready;
};

// NoGradGuard: while one lives on this thread, ops record no autograd history.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};
bool grad_mode_enabled();

}  // namespace mtc
