// The parameterised layers: Linear, Conv2d, BatchNorm2d, LayerNorm. Each creates its
// parameters with PyTorch's default initialisation and calls one op in forward (BatchNorm2d
// with `sync`: the ops of dist::sync_batch_norm).
#include "absl/strings/str_cat.h"
#include "mtc/distributed.h"
#include "mtc/nn.h"
#include "mtc/status.h"

namespace mtc::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias) {
  MTC_CHECK(in_features > 0 && out_features > 0, "Linear(", in_features, ", ", out_features, ")");
  const float bound = kaiming_uniform_bound(in_features);
  weight = register_parameter(
      "weight", parameter({out_features, in_features}, uniform_values(out_features * in_features, bound)));
  if (has_bias)
    bias = register_parameter("bias", parameter({out_features}, uniform_values(out_features, bound)));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Conv2d::Conv2d(const Conv2dConfig& c) : config(c) {
  MTC_CHECK(c.in_channels > 0 && c.out_channels > 0 && c.kernel > 0 && c.groups > 0 &&
                c.in_channels % c.groups == 0 && c.out_channels % c.groups == 0,
            "Conv2d(in ", c.in_channels, ", out ", c.out_channels, ", kernel ", c.kernel, ", groups ",
            c.groups, ")");
  const int64_t fan_in = c.in_channels / c.groups * c.kernel * c.kernel;
  const float bound = kaiming_uniform_bound(fan_in);
  const Shape w{c.out_channels, c.in_channels / c.groups, c.kernel, c.kernel};
  weight = register_parameter("weight", parameter(w, uniform_values(numel(w), bound)));
  if (c.bias)
    bias = register_parameter("bias", parameter({c.out_channels}, uniform_values(c.out_channels, bound)));
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias,
                Conv2dOptions::make(config.stride, config.padding, config.dilation, config.groups));
}

BatchNorm2d::BatchNorm2d(int64_t channels, float eps, float momentum, bool affine) : eps(eps), momentum(momentum) {
  MTC_CHECK(channels > 0, "BatchNorm2d(", channels, ")");
  if (affine) {
    weight = register_parameter("weight", constant_parameter({channels}, 1.f));
    bias = register_parameter("bias", constant_parameter({channels}, 0.f));
  } else {
    weight = constant_buffer({channels}, 1.f);
    bias = constant_buffer({channels}, 0.f);
  }
  running_mean = register_buffer("running_mean", constant_buffer({channels}, 0.f));
  running_var = register_buffer("running_var", constant_buffer({channels}, 1.f));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (sync && is_training())
    return dist::sync_batch_norm(x, weight, bias, running_mean, running_var, momentum, eps, sync);
  return batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum, eps);
}

LayerNorm::LayerNorm(int64_t dim, float eps) : eps(eps) {
  MTC_CHECK(dim > 0, "LayerNorm(", dim, ")");
  weight = register_parameter("weight", constant_parameter({dim}, 1.f));
  bias = register_parameter("bias", constant_parameter({dim}, 0.f));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight, bias, eps); }

}  // namespace mtc::nn
