// DenseNet (torchvision's layout and parameter names) and the ConvBnRelu unit the
// concatenating models share. See include/mtc/models.h.
#include "absl/strings/str_cat.h"
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {
namespace {

std::shared_ptr<nn::Conv2d> conv_no_bias(int64_t in, int64_t out, int kernel, int stride, int padding) {
  return std::make_shared<nn::Conv2d>(nn::Conv2dConfig{
      .in_channels = in, .out_channels = out, .kernel = kernel, .stride = stride, .padding = padding, .bias = false});
}

// DenseLayer: BN-ReLU-conv1x1 (to bn_size * growth), BN-ReLU-conv3x3 (to growth).
class DenseLayer final : public nn::Module {
 public:
  DenseLayer(int64_t in, int growth, int bn_size) {
    norm1_ = register_module("norm1", std::make_shared<nn::BatchNorm2d>(in));
    conv1_ = register_module("conv1", conv_no_bias(in, int64_t{bn_size} * growth, 1, 1, 0));
    norm2_ = register_module("norm2", std::make_shared<nn::BatchNorm2d>(int64_t{bn_size} * growth));
    conv2_ = register_module("conv2", conv_no_bias(int64_t{bn_size} * growth, growth, 3, 1, 1));
  }
  Tensor forward(const Tensor& x) override {
    return conv2_->forward(relu(norm2_->forward(conv1_->forward(relu(norm1_->forward(x))))));
  }
  std::string type_name() const override { return "DenseLayer"; }

 private:
  std::shared_ptr<nn::BatchNorm2d> norm1_, norm2_;
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
};

// DenseBlock: layer i reads the concatenation of the block's input and the i outputs
// before it; the block's output is the concatenation of all of them.
class DenseBlock final : public nn::Module {
 public:
  DenseBlock(int layers, int64_t in, int growth, int bn_size) {
    for (int i = 0; i < layers; ++i) {
      layers_.push_back(register_module(absl::StrCat("denselayer", i + 1),
                                        std::make_shared<DenseLayer>(in + int64_t{i} * growth, growth, bn_size)));
    }
  }
  Tensor forward(const Tensor& x) override {
    std::vector<Tensor> features{x};
    for (const auto& l : layers_) features.push_back(l->forward(features.size() == 1 ? x : concat(features, 1)));
    return concat(features, 1);
  }
  std::string type_name() const override { return "DenseBlock"; }

 private:
  std::vector<std::shared_ptr<DenseLayer>> layers_;
};

// Transition: BN-ReLU-conv1x1 (in -> out) - avgpool 2x2/2.
class Transition final : public nn::Module {
 public:
  Transition(int64_t in, int64_t out) {
    norm_ = register_module("norm", std::make_shared<nn::BatchNorm2d>(in));
    conv_ = register_module("conv", conv_no_bias(in, out, 1, 1, 0));
  }
  Tensor forward(const Tensor& x) override {
    return avg_pool2d(conv_->forward(relu(norm_->forward(x))), Pool2dOptions::make(2, 2));
  }
  std::string type_name() const override { return "Transition"; }

 private:
  std::shared_ptr<nn::BatchNorm2d> norm_;
  std::shared_ptr<nn::Conv2d> conv_;
};

}  // namespace

ConvBnRelu::ConvBnRelu(int64_t in, int64_t out, int kernel, int stride, int padding, float eps) {
  conv = register_module("conv", conv_no_bias(in, out, kernel, stride, padding));
  bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(out, eps));
}

Tensor ConvBnRelu::forward(const Tensor& x) { return relu(bn->forward(conv->forward(x))); }

DenseNet::DenseNet(const DenseNetConfig& c) : imagenet_stem_(c.imagenet_stem) {
  MTC_CHECK(!c.blocks.empty() && c.growth >= 1 && c.init_channels >= 1 && c.bn_size >= 1 && c.num_classes >= 1,
            "DenseNet with ", c.blocks.size(), " blocks, growth ", c.growth, ", ", c.num_classes, " classes");
  conv0_ = register_module("conv0", c.imagenet_stem ? conv_no_bias(3, c.init_channels, 7, 2, 3)
                                                    : conv_no_bias(3, c.init_channels, 3, 1, 1));
  norm0_ = register_module("norm0", std::make_shared<nn::BatchNorm2d>(c.init_channels));
  int64_t ch = c.init_channels;
  for (size_t b = 0; b < c.blocks.size(); ++b) {
    MTC_CHECK(c.blocks[b] >= 1, "DenseNet block ", b + 1, " of ", c.blocks[b], " layers");
    stages_.push_back(register_module(absl::StrCat("denseblock", b + 1),
                                      std::make_shared<DenseBlock>(c.blocks[b], ch, c.growth, c.bn_size)));
    ch += int64_t{c.blocks[b]} * c.growth;
    if (b + 1 < c.blocks.size()) {
      stages_.push_back(register_module(absl::StrCat("transition", b + 1), std::make_shared<Transition>(ch, ch / 2)));
      ch /= 2;
    }
  }
  norm5_ = register_module("norm5", std::make_shared<nn::BatchNorm2d>(ch));
  classifier_ = register_module("classifier", std::make_shared<nn::Linear>(ch, c.num_classes));
}

Tensor DenseNet::forward(const Tensor& x) {
  Tensor y = relu(norm0_->forward(conv0_->forward(x)));
  if (imagenet_stem_) y = max_pool2d(y, Pool2dOptions::make(3, 2, 1));
  for (const auto& s : stages_) y = s->forward(y);
  return classifier_->forward(global_avg_pool(relu(norm5_->forward(y))));
}

}  // namespace mtc::models
