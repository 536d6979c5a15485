// The autograd tape and the backward pass. See autograd.h.
#include "autograd.h"

#include "dist/dtp.h"

#include <algorithm>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "mtc/interpreter.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"
#include "mtc/status.h"

namespace mtc {

absl::Status Tensor::backward() const { return run_backward(*this); }

namespace {
// While backward runs, ops without tensor inputs (zeros for a missing gradient, ones for
// the seed) are issued on the loss's interpreter, whichever runtime is current.
thread_local Interpreter* tls_backward_interp = nullptr;
}  // namespace

bool in_backward() { return tls_backward_interp != nullptr; }

TensorList call(std::shared_ptr<const OpDef> op, std::span<const Tensor> inputs) {
  // DTP: an op on global tensors is split across their partition group; the dispatch
  // comes back here with each rank's shards.
  if (dtp::any_global(inputs)) return dtp::dispatch(std::move(op), inputs);
  Interpreter* interp = nullptr;
  for (const Tensor& t : inputs) {
    if (t.defined()) {
      interp = t.interpreter();
      break;
    }
  }
  if (interp == nullptr) interp = tls_backward_interp;
  if (interp == nullptr) interp = &Runtime::current().interpreter();

  bool needs_grad = false;
  if (grad_mode_enabled() && op->differentiable()) {
    for (const Tensor& t : inputs) needs_grad |= t.defined() && t.requires_grad();
  }
  TensorList outs = interp->apply(op, inputs);
  if (!needs_grad) return outs;

  auto node = std::make_shared<GradNode>();
  const uint64_t si = op->saves_inputs(), so = op->saves_outputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->saved_inputs.push_back((si >> i) & 1 ? inputs[i].detach() : Tensor());
    node->input_descs.push_back(inputs[i].desc());
    node->input_metas.push_back(inputs[i].requires_grad() ? inputs[i].meta() : nullptr);
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    node->saved_outputs.push_back((so >> i) & 1 ? outs[i].detach() : Tensor());
    node->output_descs.push_back(outs[i].desc());
  }
  node->op = std::move(op);
  for (size_t i = 0; i < outs.size(); ++i) {
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_index = static_cast<int>(i);
    outs[i].set_meta(std::move(meta));
  }
  return outs;
}

Tensor call1(std::shared_ptr<const OpDef> op, std::span<const Tensor> inputs) {
  TensorList outs = call(std::move(op), inputs);
  MTC_CHECK(outs.size() == 1, "call1 on an op with ", outs.size(), " outputs");
  return std::move(outs[0]);
}

namespace {
// accumulate: a += b, where either may be undefined.
void accumulate(Tensor& a, const Tensor& b) {
  if (!b.defined()) return;
  a = a.defined() ? add(a, b) : b;
}
}  // namespace

absl::Status run_backward(const Tensor& root, Tensor grad_root) {
  if (!root.defined()) return absl::InvalidArgumentError("backward: undefined tensor");
  if (root.poisoned()) {
    absl::Status s = root.interpreter()->sync();
    return s.ok() ? absl::FailedPreconditionError("backward: the loss's op failed") : s;
  }
  if (root.numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("backward: the loss is ", root.desc().str(),
                                                   ", expected a single element"));
  }
  if (!root.requires_grad()) {
    return absl::InvalidArgumentError("backward: the loss does not require grad (no input to it does)");
  }
  NoGradGuard no_grad;
  struct InterpScope {
    Interpreter* prev;
    explicit InterpScope(Interpreter* i) : prev(std::exchange(tls_backward_interp, i)) {}
    ~InterpScope() { tls_backward_interp = prev; }
  } scope(root.interpreter());
  if (!grad_root.defined()) {
    // The quantity differentiated is the sum of the ranks' losses (include/mtc/distributed.h).
    // A Partial loss is that sum already; a Replicated one is counted once per rank, so
    // each rank seeds 1/p.
    const int parts = root.global() ? dtp::group_size(root.ref()->dist->group) : 1;
    grad_root = root.global() && dtp::placement(root).replicated() && parts > 1 ? full(root.shape(), 1.f / parts)
                                                                               : ones(root.shape());
  }

  const auto& root_meta = root.meta();
  if (!root_meta->grad_fn) {  // the loss is itself a leaf
    accumulate(root_meta->grad, grad_root);
    return absl::OkStatus();
  }
  // Topological order by iterative DFS (post-order), then walk it in reverse.
  std::vector<GradNode*> order;
  absl::flat_hash_map<GradNode*, int> state;  // 1: on stack, 2: done
  std::vector<std::pair<GradNode*, size_t>> stack{{root_meta->grad_fn.get(), 0}};
  state[root_meta->grad_fn.get()] = 1;
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->input_metas.size()) {
      const auto& m = node->input_metas[next++];
      if (m && m->grad_fn && !state.contains(m->grad_fn.get())) {
        state[m->grad_fn.get()] = 1;
        stack.emplace_back(m->grad_fn.get(), 0);
      }
      continue;
    }
    state[node] = 2;
    order.push_back(node);
    stack.pop_back();
  }

  // Leaves with a grad_ready hook: how many edges of the graph still owe them a gradient.
  absl::flat_hash_map<AutogradMeta*, int> owed;
  for (GradNode* node : order) {
    for (const auto& m : node->input_metas) {
      if (m && !m->grad_fn && m->grad_ready) ++owed[m.get()];
    }
  }
  auto paid = [&](AutogradMeta* m) {
    auto it = owed.find(m);
    if (it != owed.end() && --it->second == 0) {
      owed.erase(it);
      m->grad_ready(*m);
    }
  };
  auto settle = [&](GradNode* node) {  // node passed back whatever it will
    if (owed.empty()) return;
    for (const auto& m : node->input_metas) {
      if (m && !m->grad_fn) paid(m.get());
    }
  };

  absl::flat_hash_map<GradNode*, TensorList> pending;
  pending[root_meta->grad_fn.get()].resize(root_meta->grad_fn->output_descs.size());
  pending[root_meta->grad_fn.get()][root_meta->output_index] = grad_root;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    GradNode* node = *it;
    auto p = pending.find(node);
    if (p == pending.end()) {  // no gradient reached it
      settle(node);
      continue;
    }
    TensorList grads = std::move(p->second);
    pending.erase(p);
    grads.resize(node->output_descs.size());
    if (node->released) {
      return absl::FailedPreconditionError(absl::StrCat(
          "backward through op ", node->op->name(), " a second time: its saved tensors were freed"));
    }
    const size_t n_in = node->input_metas.size();
    std::unique_ptr<bool[]> needs(new bool[n_in]);
    for (size_t i = 0; i < n_in; ++i) needs[i] = node->input_metas[i] != nullptr;
    BackwardArgs args{node->saved_inputs, node->saved_outputs, grads, node->input_descs,
                      node->output_descs, std::span<const bool>(needs.get(), n_in)};
    MTC_ASSIGN_OR_RETURN(TensorList in_grads, node->op->backward(args));
    MTC_CHECK(in_grads.size() <= node->input_metas.size(), "op ", node->op->name(),
              ": backward returned ", in_grads.size(), " gradients for ",
              node->input_metas.size(), " inputs");
    node->saved_inputs.clear();
    node->saved_outputs.clear();
    node->released = true;
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const auto& m = node->input_metas[i];
      if (!m || !in_grads[i].defined()) continue;
      if (!in_grads[i].poisoned()) {
        MTC_CHECK(in_grads[i].shape() == node->input_descs[i].shape, "op ", node->op->name(),
                  ": gradient of input ", i, " is ", in_grads[i].desc().str(), ", input is ",
                  node->input_descs[i].str());
      }
      if (m->grad_fn) {
        TensorList& slot = pending[m->grad_fn.get()];
        slot.resize(m->grad_fn->output_descs.size());
        accumulate(slot[m->output_index], in_grads[i]);
      } else {
        accumulate(m->grad, in_grads[i]);
        // A leaf's gradient lives in the gradient region, out of DTE's reach.
        if (!m->grad.poisoned()) m->grad.interpreter()->make_gradient(m->grad);
      }
    }
    settle(node);
  }
  return absl::OkStatus();
}

}  // namespace mtc
