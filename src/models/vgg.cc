// Vgg: VGG with batch norm in the CIFAR layout (conv3x3-BN-ReLU stacks and 2x2 max
// pools, then one Linear classifier on the pooled features).
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {

Vgg::Vgg(const std::vector<int>& config, int num_classes) {
  MTC_CHECK(!config.empty() && num_classes >= 1, "Vgg with ", config.size(), " layers, ", num_classes, " classes");
  features_ = register_module("features", std::make_shared<nn::Sequential>());
  int64_t in = 3;
  for (int w : config) {
    MTC_CHECK(w >= 0, "Vgg: width ", w);
    if (w == 0) {
      features_->push_back(std::make_shared<nn::MaxPool2d>(2, 2));
      continue;
    }
    features_->push_back(std::make_shared<nn::Conv2d>(
        nn::Conv2dConfig{.in_channels = in, .out_channels = w, .kernel = 3, .padding = 1}));
    features_->push_back(std::make_shared<nn::BatchNorm2d>(w));
    features_->push_back(std::make_shared<nn::ReLU>());
    in = w;
  }
  classifier_ = register_module("classifier", std::make_shared<nn::Linear>(in, num_classes));
}

Tensor Vgg::forward(const Tensor& x) { return classifier_->forward(global_avg_pool(features_->forward(x))); }

}  // namespace mtc::models
