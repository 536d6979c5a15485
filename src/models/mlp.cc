// Mlp: flatten, Linear-ReLU per hidden width, and a final Linear to the classes.
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {

Mlp::Mlp(int64_t in_features, const std::vector<int64_t>& hidden, int num_classes) {
  MTC_CHECK(in_features >= 1 && num_classes >= 1, "Mlp(", in_features, " -> ", num_classes, ")");
  layers_ = register_module("layers", std::make_shared<nn::Sequential>());
  layers_->push_back(std::make_shared<nn::Flatten>());
  int64_t in = in_features;
  for (int64_t h : hidden) {
    layers_->push_back(std::make_shared<nn::Linear>(in, h));
    layers_->push_back(std::make_shared<nn::ReLU>());
    in = h;
  }
  layers_->push_back(std::make_shared<nn::Linear>(in, num_classes));
}

Tensor Mlp::forward(const Tensor& x) { return layers_->forward(x); }

}  // namespace mtc::models
