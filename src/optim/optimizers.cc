// Sgd and AdamW: argument checks, lazily created persistent state, and one step op per
// parameter with a gradient (see optim.h for the formulas).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "autograd.h"
#include "dist/dtp.h"
#include "mtc/dtp.h"
#include "mtc/ops.h"
#include "mtc/optim.h"
#include "optim/step_ops.h"

namespace mtc::optim {
namespace {
// zeros_like_persistent: optimizer state, never evicted.
// A sharded parameter's state is sharded the same way (DTP).
Tensor zeros_like_persistent(const Tensor& p) { return dtp::zeros_like(p, /*persistent=*/true); }
absl::Status check_not_negative(const char* what, float v) {
  if (v >= 0.f) return absl::OkStatus();  // also rejects NaN
  return absl::InvalidArgumentError(absl::StrCat("invalid ", what, " ", v, ": expected >= 0"));
}
}  // namespace

namespace {
// local_bytes: a state tensor's bytes on this rank (its shard under DTP).
size_t local_bytes(const TensorList& ts) {
  size_t b = 0;
  for (const Tensor& t : ts) b += t.defined() ? dtp::local(t).desc().bytes() : 0;
  return b;
}
}  // namespace

size_t Sgd::state_bytes() const { return local_bytes(bufs_); }
size_t AdamW::state_bytes() const { return local_bytes(exp_avg_) + local_bytes(exp_avg_sq_); }

Optimizer::StateSlots Sgd::state_slots(size_t i) {
  MTC_CHECK(i < params_.size(), "state_slots(", i, ") of ", params_.size(), " parameters");
  StateSlots s;
  if (opts_.momentum != 0.f) s.tensors.push_back({"momentum_buffer", &bufs_[i]});
  return s;
}

Optimizer::StateSlots AdamW::state_slots(size_t i) {
  MTC_CHECK(i < params_.size(), "state_slots(", i, ") of ", params_.size(), " parameters");
  return StateSlots{{{"exp_avg", &exp_avg_[i]}, {"exp_avg_sq", &exp_avg_sq_[i]}}, &steps_[i]};
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

// ---- SGD ----
Sgd::Sgd(TensorList params, const SgdOptions& o) : Optimizer(std::move(params), o.lr), opts_(o) {
  bufs_.resize(params_.size());
}

absl::StatusOr<std::unique_ptr<Sgd>> Sgd::create(TensorList params, const SgdOptions& o) {
  MTC_RETURN_IF_ERROR(check_not_negative("learning rate", o.lr));
  MTC_RETURN_IF_ERROR(check_not_negative("momentum", o.momentum));
  MTC_RETURN_IF_ERROR(check_not_negative("weight_decay", o.weight_decay));
  if (o.nesterov && (o.momentum <= 0.f || o.dampening != 0.f)) {
    return absl::InvalidArgumentError("Nesterov momentum requires a momentum > 0 and zero dampening");
  }
  return std::unique_ptr<Sgd>(new Sgd(std::move(params), o));
}

void Sgd::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    auto op = std::make_shared<SgdStepOp>();
    op->lr = lr_;
    op->momentum = opts_.momentum;
    op->dampening = opts_.dampening;
    op->weight_decay = opts_.weight_decay;
    op->nesterov = opts_.nesterov;
    if (opts_.momentum == 0.f) {
      call(std::move(op), {p, g});
      continue;
    }
    op->first = !bufs_[i].defined();
    if (op->first) bufs_[i] = zeros_like_persistent(p);
    call(std::move(op), {p, g, bufs_[i]});
  }
}

// ---- AdamW ----
AdamW::AdamW(TensorList params, const AdamWOptions& o) : Optimizer(std::move(params), o.lr), opts_(o) {
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  steps_.resize(params_.size(), 0);
}

absl::StatusOr<std::unique_ptr<AdamW>> AdamW::create(TensorList params, const AdamWOptions& o) {
  MTC_RETURN_IF_ERROR(check_not_negative("learning rate", o.lr));
  MTC_RETURN_IF_ERROR(check_not_negative("epsilon", o.eps));
  MTC_RETURN_IF_ERROR(check_not_negative("weight_decay", o.weight_decay));
  for (float b : {o.beta1, o.beta2}) {
    if (!(b >= 0.f && b < 1.f))
      return absl::InvalidArgumentError(absl::StrCat("invalid beta ", b, ": expected [0, 1)"));
  }
  return std::unique_ptr<AdamW>(new AdamW(std::move(params), o));
}

void AdamW::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros_like_persistent(p);
      exp_avg_sq_[i] = zeros_like_persistent(p);
    }
    const double t = static_cast<double>(++steps_[i]);
    const double lr = lr_;
    auto op = std::make_shared<AdamWStepOp>();
    op->decay = static_cast<float>(1.0 - lr * opts_.weight_decay);
    op->beta1 = opts_.beta1;
    op->beta2 = opts_.beta2;
    op->eps = opts_.eps;
    op->step_size = static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(opts_.beta1), t)));
    op->bias_correction2_sqrt =
        static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(opts_.beta2), t)));
    call(std::move(op), {p, g, exp_avg_[i], exp_avg_sq_[i]});
  }
}

}  // namespace mtc::optim
