// Autograd: a tape over the interpreter. call() runs an op through the interpreter and,
// when grad mode is on and an input requires grad, records a GradNode holding what the
// op's backward rule asked to save. Backward walks the nodes from a scalar loss in
// reverse topological order; each rule issues ops, so gradients run on the interpreter.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "mtc/tensor.h"
#include "op_def.h"

namespace mtc {

struct GradNode {
  std::shared_ptr<const OpDef> op;
  TensorList saved_inputs;   // detached; undefined where not saved
  TensorList saved_outputs;  // detached; undefined where not saved
  std::vector<TensorDesc> input_descs, output_descs;
  std::vector<std::shared_ptr<AutogradMeta>> input_metas;  // null where no grad is needed
  bool released = false;  // saved tensors dropped after backward ran through it
};

// call: applies op to inputs on their interpreter (or the current runtime's when there
// are none) and records autograd history. Returns the op's outputs.
TensorList call(std::shared_ptr<const OpDef> op, std::span<const Tensor> inputs);
Tensor call1(std::shared_ptr<const OpDef> op, std::span<const Tensor> inputs);
inline Tensor call1(std::shared_ptr<const OpDef> op, std::initializer_list<Tensor> inputs) {
  return call1(std::move(op), std::span<const Tensor>(inputs.begin(), inputs.size()));
}
inline TensorList call(std::shared_ptr<const OpDef> op, std::initializer_list<Tensor> inputs) {
  return call(std::move(op), std::span<const Tensor>(inputs.begin(), inputs.size()));
}

// run_backward: gradients of root (a one-element tensor) with respect to every leaf that
// requires grad, accumulated into the leaves' grad(). grad_root defaults to ones.
absl::Status run_backward(const Tensor& root, Tensor grad_root = Tensor());

// in_backward: this thread is inside run_backward. Ops it issues make gradients, which DTE
// never drops (Note [Gradients are not recomputed] in executor.cc).
bool in_backward();

}  // namespace mtc
