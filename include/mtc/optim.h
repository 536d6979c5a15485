// Optimizers after torch.optim: SGD (momentum, dampening, weight decay, Nesterov) and
// AdamW, with PyTorch's exact update formulas. step() issues ONE in-place op per
// parameter (it mutates the parameter and its state, makes no outputs) under
// NoGradGuard; it returns at once and errors surface at the next synchronising call.
// Optimizer state is persistent (never evicted), created at a parameter's first step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mtc/tensor.h"

namespace mtc::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // step: updates every parameter that has a gradient (others are skipped, as PyTorch).
  virtual void step() = 0;
  // zero_grad: clears every parameter's gradient (set_to_none, PyTorch's default).
  void zero_grad();
  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }  // for schedules
  const TensorList& params() const { return params_; }
  // state_bytes: this rank's bytes of optimizer state (momentum, moments) made so far.
  virtual size_t state_bytes() const = 0;
  // name: "sgd" or "adamw", as mtc-train's --optimizer and a checkpoint spell it.
  virtual const char* name() const = 0;
  // StateSlots: parameter i's state for checkpoints: its tensors by name (PyTorch's:
  // momentum_buffer; exp_avg, exp_avg_sq), each undefined before the parameter's first
  // step, and its step count where the optimizer keeps one (AdamW), else nullptr. A
  // checkpoint's restore sets them; a defined tensor must be persistent and shaped as
  // the parameter.
  struct StateSlots {
    std::vector<std::pair<const char*, Tensor*>> tensors;
    int64_t* step = nullptr;
  };
  virtual StateSlots state_slots(size_t i) = 0;

 protected:
  Optimizer(TensorList params, float lr) : params_(std::move(params)), lr_(lr) {}
  TensorList params_;
  float lr_;
};

struct SgdOptions {
  float lr = 0.1f;
  float momentum = 0.f;
  float dampening = 0.f;
  float weight_decay = 0.f;
  bool nesterov = false;
};

// Sgd, per parameter p with gradient g (torch.optim.SGD):
//   d = g + weight_decay * p
//   buf = d at the first step, else momentum * buf + (1 - dampening) * d  (if momentum != 0)
//   d = d + momentum * buf if nesterov, else buf                          (if momentum != 0)
//   p = p - lr * d
class Sgd final : public Optimizer {
 public:
  // create: InvalidArgument for a negative lr, momentum or weight decay, or Nesterov
  // without momentum or with dampening (PyTorch's checks).
  static absl::StatusOr<std::unique_ptr<Sgd>> create(TensorList params, const SgdOptions& o);
  void step() override;
  size_t state_bytes() const override;
  const char* name() const override { return "sgd"; }
  StateSlots state_slots(size_t i) override;
  const SgdOptions& options() const { return opts_; }
  // momentum_buffer: parameter i's buffer; undefined before its first step or without momentum.
  const Tensor& momentum_buffer(size_t i) const { return bufs_[i]; }

 private:
  Sgd(TensorList params, const SgdOptions& o);
  SgdOptions opts_;
  TensorList bufs_;
};

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
};

// AdamW, per parameter at its step t = 1, 2, ... (torch.optim.AdamW, amsgrad off):
//   p = p * (1 - lr * weight_decay)
//   m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
class AdamW final : public Optimizer {
 public:
  // create: InvalidArgument for a negative lr, eps or weight decay, or betas outside [0, 1).
  static absl::StatusOr<std::unique_ptr<AdamW>> create(TensorList params, const AdamWOptions& o);
  void step() override;
  size_t state_bytes() const override;
  const char* name() const override { return "adamw"; }
  StateSlots state_slots(size_t i) override;
  const AdamWOptions& options() const { return opts_; }
  const Tensor& exp_avg(size_t i) const { return exp_avg_[i]; }
  const Tensor& exp_avg_sq(size_t i) const { return exp_avg_sq_[i]; }

 private:
  AdamW(TensorList params, const AdamWOptions& o);
  AdamWOptions opts_;
  TensorList exp_avg_, exp_avg_sq_;
  std::vector<int64_t> steps_;  // per parameter, as PyTorch's state["step"]
};

// LrSchedule: the learning rate of iteration t = 1, 2, ..., total (the step it takes),
// as PyTorch's schedulers give it when stepped once per iteration:
//   t <= warmup:  base * t / warmup                      (LinearLR, start_factor 1/warmup)
//   then, with s = t - warmup - 1 (0 at the first iteration after the warm-up):
//   constant:     base
//   step:         base * gamma^floor(s / step_size)       (StepLR)
//   cosine:       min + (base - min) * (1 + cos(pi * s / (total - warmup))) / 2
//                                                         (CosineAnnealingLR, T_max = total - warmup)
// The rate depends on t alone, so a resumed run continues the schedule exactly.
struct LrSchedule {
  enum class Kind : uint8_t { kConstant, kStep, kCosine };
  Kind kind = Kind::kConstant;
  float base = 0.1f;
  int64_t warmup = 0;     // iterations of linear warm-up (0: none)
  int64_t step_size = 0;  // step: iterations between decays
  float gamma = 0.1f;     // step: the factor of each decay
  float min = 0.f;        // cosine: the rate it ends at
  int64_t total = 0;      // cosine: the run's iterations
  // check: InvalidArgument naming the field for a schedule that cannot run: a negative
  // rate or warm-up, step without step_size >= 1 or with gamma outside (0, 1], cosine with
  // min > base or no iterations after the warm-up.
  absl::Status check() const;
  float at(int64_t t) const;
  std::string describe() const;  // "cosine from 0.1 to 0 over 90 iterations after 10 of warm-up"
};
// parse_schedule_kind: "constant", "step" or "cosine".
absl::StatusOr<LrSchedule::Kind> parse_schedule_kind(const std::string& name);

}  // namespace mtc::optim
