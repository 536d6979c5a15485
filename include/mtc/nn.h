// Neural-network modules on mtc's ops, after torch.nn: a Module owns named parameters
// (persistent leaf tensors that require grad), buffers (persistent tensors without grad,
// such as batch norm's running statistics, which the batch_norm op updates in place) and
// child modules. Initialisation follows PyTorch's defaults, drawn from host generators
// seeded by the current runtime's seed stream, so a run is reproducible from its seed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mtc/data.h"
#include "mtc/ops.h"
#include "mtc/tensor.h"

namespace mtc::comm {
class Communicator;
}

namespace mtc::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Module: the base of every layer and model. Not copyable; held by shared_ptr.
class Module {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // forward: the module applied to x. operator() is the same.
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  // type_name: "Conv2d", "BasicBlock", ... for messages.
  virtual std::string type_name() const = 0;

  // parameters: this module's and its children's, depth first in registration order.
  TensorList parameters() const;
  // named_parameters: the same with dotted paths, e.g. "layer1.0.conv1.weight".
  NamedTensors named_parameters() const;
  TensorList buffers() const;
  NamedTensors named_buffers() const;
  // num_parameters: elements in all parameters (not buffers).
  int64_t num_parameters() const;
  // children: the direct sub-modules, named.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  // train / eval: sets the mode of this module and every descendant (batch norm uses the
  // batch statistics in training, the running ones in eval).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // zero_grad: clears the gradient of every parameter.
  void zero_grad();
  // auxiliary_loss: a term the last forward adds to the training loss (a mixture of
  // experts' load-balancing loss), or undefined when there is none. This one sums the
  // children's; a module with a term of its own overrides it, and hands the term over (a
  // second call returns none), so that the module holds no graph past the step.
  // train_step adds it.
  virtual Tensor auxiliary_loss();

 protected:
  Module() = default;
  // register_parameter: t must be a leaf that requires grad; returns t.
  Tensor register_parameter(const std::string& name, Tensor t);
  // register_buffer: a persistent tensor without grad; returns t.
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;

  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// ---- initialisation (PyTorch's defaults) ----
// init_rng: a generator for one tensor's initial values, seeded by the next seed of the
// current runtime's counter-based stream (RuntimeOptions::seed).
data::Rng init_rng();
// uniform_values: n values drawn from U(-bound, bound).
std::vector<float> uniform_values(int64_t n, float bound);
// parameter: a persistent leaf tensor holding `values` that requires grad.
Tensor parameter(const Shape& shape, std::span<const float> values);
// constant_parameter / constant_buffer: filled with `value` (persistent).
Tensor constant_parameter(const Shape& shape, float value);
Tensor constant_buffer(const Shape& shape, float value);
// kaiming_uniform_bound: the bound of kaiming_uniform_(a=sqrt(5)), PyTorch's default for
// Linear and Conv2d weights, and of their biases: 1/sqrt(fan_in).
float kaiming_uniform_bound(int64_t fan_in);

// ---- layers ----

// NormalInit: initialise a layer's weight from N(0, std^2) and its bias to 0 (GPT-2's
// initialisation, std 0.02) instead of PyTorch's default.
struct NormalInit {
  float std = 0.02f;
};

// Linear: y = x W^T + b; weight (out, in), bias (out). W and b ~ U(-1/sqrt(in), 1/sqrt(in)),
// or with NormalInit W ~ N(0, std^2) and b = 0.
class Linear final : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Linear(int64_t in_features, int64_t out_features, NormalInit init, bool bias = true);
  Tensor forward(const Tensor& x) override;  // x (..., in) -> (..., out)
  std::string type_name() const override { return "Linear"; }
  Tensor weight, bias;  // bias undefined without bias
};

// Conv2dConfig: designated-initialiser friendly, e.g.
//   Conv2d({.in_channels = 3, .out_channels = 16, .kernel = 3, .padding = 1, .bias = false})
struct Conv2dConfig {
  int64_t in_channels = 0, out_channels = 0;
  int kernel = 3;
  int stride = 1;
  int padding = 0;
  int dilation = 1;
  int groups = 1;
  bool bias = true;
};

// Conv2d: weight (OC, IC/groups, K, K), bias (OC); both ~ U(-1/sqrt(fan_in), ..) with
// fan_in = IC/groups * K * K.
class Conv2d final : public Module {
 public:
  explicit Conv2d(const Conv2dConfig& c);
  Tensor forward(const Tensor& x) override;  // x (N, IC, H, W) -> (N, OC, H', W')
  std::string type_name() const override { return "Conv2d"; }
  Conv2dConfig config;
  Tensor weight, bias;
};

// BatchNorm2d: gamma 1, beta 0 (parameters); running_mean 0, running_var 1 (buffers,
// updated in place by the batch_norm op in training). affine = false (PyTorch's
// affine=False): gamma and beta stay 1 and 0, held as constants that are neither
// parameters nor buffers.
class BatchNorm2d final : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f, bool affine = true);
  Tensor forward(const Tensor& x) override;  // x (N, C, H, W)
  std::string type_name() const override { return "BatchNorm2d"; }
  float eps, momentum;
  Tensor weight, bias, running_mean, running_var;
  // sync: in training, normalise with the statistics of the global batch over these
  // ranks (dist::sync_batch_norm; set by dist::convert_sync_batch_norm). Null: this
  // rank's batch alone.
  std::shared_ptr<comm::Communicator> sync;
};

// LayerNorm: over the last dimension; gamma 1, beta 0.
class LayerNorm final : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  float eps;
  Tensor weight, bias;
};

class ReLU final : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string type_name() const override { return "ReLU"; }
};

// Flatten: dims start_dim.. into one (start_dim 1 keeps the batch).
class Flatten final : public Module {
 public:
  explicit Flatten(int start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim_); }
  std::string type_name() const override { return "Flatten"; }

 private:
  int start_dim_;
};

class MaxPool2d final : public Module {
 public:
  MaxPool2d(int kernel, int stride, int padding = 0) : opts_(Pool2dOptions::make(kernel, stride, padding)) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, opts_); }
  std::string type_name() const override { return "MaxPool2d"; }

 private:
  Pool2dOptions opts_;
};

// GlobalAvgPool: (N, C, H, W) -> (N, C), i.e. AdaptiveAvgPool2d(1) then flatten.
class GlobalAvgPool final : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_avg_pool(x); }
  std::string type_name() const override { return "GlobalAvgPool"; }
};

// Sequential: children named "0", "1", ... applied in order.
class Sequential final : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);
  Sequential& push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return layers_.size(); }
  Module& operator[](size_t i) const { return *layers_[i]; }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

// ---- transformer layers (src/nn/transformer.cc) ----

// normal_values: n values drawn from N(0, std^2), e.g. std 0.02 for a ViT's positional
// embedding.
std::vector<float> normal_values(int64_t n, float std);

// multi_head_self_attention: multi-head self-attention as a function of its weights, so
// that it can be checked against a reference directly. x (N, T, D); qkv_weight (3D, D)
// and qkv_bias (3D) or undefined: rows [0, D) make q, [D, 2D) k, [2D, 3D) v, and head h
// uses columns [h*d, (h+1)*d) of each, d = D / heads; proj_weight (D, D), proj_bias (D)
// or undefined. Per head softmax(q k^T / sqrt(d)) v, the heads concatenated, then the
// output projection: -> (N, T, D). No mask, no dropout.
Tensor multi_head_self_attention(const Tensor& x, const Tensor& qkv_weight, const Tensor& qkv_bias,
                                 const Tensor& proj_weight, const Tensor& proj_bias, int heads);

// causal_mask: the (t, t) additive mask of causal attention, 0 on and below the diagonal
// and -1e9 above it (position i may attend to positions j <= i only); a persistent
// tensor without grad, made once and shared by every layer that uses it.
Tensor causal_mask(int64_t t);
inline constexpr float kMaskedScore = -1e9f;  // what causal_mask adds above the diagonal

// scaled_dot_product_attention: multi-head attention of projected q, k, v (N, T, D):
// head h is columns [h*d, (h+1)*d) of each, d = D / heads; per head
// softmax(q k^T / sqrt(d) + mask) v, the heads concatenated back -> (N, T, D). mask:
// undefined (none), or an additive (S, S) mask with S >= T of which the top-left (T, T)
// block is used (a causal_mask made for the longest sequence serves shorter ones). On
// existing ops: reshape (N, T, H, d), permute (N, H, T, d), matmul, add, softmax(-1),
// matmul, permute back, reshape.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads,
                                    const Tensor& mask = Tensor());

// MultiheadSelfAttention: the above with children qkv = Linear(D, 3D) and
// proj = Linear(D, D) (timm's names: "qkv.weight", "proj.bias"). dim % heads == 0.
class MultiheadSelfAttention final : public Module {
 public:
  MultiheadSelfAttention(int64_t dim, int heads, bool qkv_bias = true);
  Tensor forward(const Tensor& x) override;  // x (N, T, D) -> (N, T, D)
  std::string type_name() const override { return "MultiheadSelfAttention"; }
  int heads;
  std::shared_ptr<Linear> qkv, proj;
};

// TransformerMlp: fc1 = Linear(D, hidden), exact GELU, fc2 = Linear(hidden, D); with
// NormalInit both Linears are initialised so.
class TransformerMlp final : public Module {
 public:
  TransformerMlp(int64_t dim, int64_t hidden);
  TransformerMlp(int64_t dim, int64_t hidden, NormalInit init);
  Tensor forward(const Tensor& x) override;  // (..., D) -> (..., D)
  std::string type_name() const override { return "TransformerMlp"; }
  std::shared_ptr<Linear> fc1, fc2;
};

// TransformerBlock: a pre-norm encoder block, x = x + attn(norm1(x)), then
// x = x + mlp(norm2(x)), with mlp hidden width mlp_ratio * D. Children "norm1", "attn",
// "norm2", "mlp".
class TransformerBlock final : public Module {
 public:
  TransformerBlock(int64_t dim, int heads, int mlp_ratio = 4);
  Tensor forward(const Tensor& x) override;  // x (N, T, D) -> (N, T, D)
  std::string type_name() const override { return "TransformerBlock"; }
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<MultiheadSelfAttention> attn;
  std::shared_ptr<TransformerMlp> mlp;
};

}  // namespace mtc::nn
