// Module plumbing (registration, recursive parameter and buffer walks, train/eval,
// zero_grad), Sequential, and the initialisation helpers of nn.h.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "mtc/nn.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"
#include "mtc/status.h"

namespace mtc::nn {

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  MTC_CHECK(t.defined() && t.requires_grad() && !t.meta()->grad_fn, type_name(), ": parameter '", name,
            "' must be a leaf tensor that requires grad");
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  MTC_CHECK(t.defined(), type_name(), ": buffer '", name, "' is undefined");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  MTC_CHECK(m != nullptr, type_name(), ": child '", name, "' is null");
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(absl::StrCat(prefix, name, "."), params, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

static TensorList tensors_of(const NamedTensors& named) {
  TensorList out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}
TensorList Module::parameters() const { return tensors_of(named_parameters()); }
TensorList Module::buffers() const { return tensors_of(named_buffers()); }

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.set_grad(Tensor());
}

Tensor Module::auxiliary_loss() {
  Tensor total;
  for (const auto& [name, child] : children_) {
    Tensor t = child->auxiliary_loss();
    if (t.defined()) total = total.defined() ? add(total, t) : t;
  }
  return total;
}

// ---- Sequential ----
Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) {
  for (auto& m : layers) push_back(std::move(m));
}

Sequential& Sequential::push_back(std::shared_ptr<Module> m) {
  layers_.push_back(register_module(absl::StrCat(layers_.size()), std::move(m)));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : layers_) y = m->forward(y);
  return y;
}

// ---- initialisation ----
data::Rng init_rng() { return data::Rng(Runtime::current().next_seed()); }

std::vector<float> uniform_values(int64_t n, float bound) {
  data::Rng rng = init_rng();
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = rng.uniform(-bound, bound);
  return v;
}

Tensor parameter(const Shape& shape, std::span<const float> values) {
  Tensor t = from_vector(shape, values, /*persistent=*/true);
  t.set_requires_grad(true);
  return t;
}

Tensor constant_parameter(const Shape& shape, float value) {
  return parameter(shape, std::vector<float>(static_cast<size_t>(numel(shape)), value));
}

Tensor constant_buffer(const Shape& shape, float value) {
  return from_vector(shape, std::vector<float>(static_cast<size_t>(numel(shape)), value),
                     /*persistent=*/true);
}

// kaiming_uniform_(a=sqrt(5)): gain = sqrt(2 / (1 + a^2)) = sqrt(1/3), bound =
// gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in); the bias bound is 1 / sqrt(fan_in) as well.
float kaiming_uniform_bound(int64_t fan_in) {
  MTC_CHECK(fan_in > 0, "fan_in ", fan_in);
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
}

}  // namespace mtc::nn
