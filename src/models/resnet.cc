// The ResNets: BasicBlock and Bottleneck, the CIFAR ResNet-(6n+2) and torchvision's
// ImageNet ResNet. Layer names follow torchvision so that parameter paths match.
#include "absl/strings/str_cat.h"
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {
namespace {

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int kernel, int stride, int padding) {
  return std::make_shared<nn::Conv2d>(nn::Conv2dConfig{.in_channels = in,
                                                       .out_channels = out,
                                                       .kernel = kernel,
                                                       .stride = stride,
                                                       .padding = padding,
                                                       .bias = false});
}

// shortcut: the projection (1x1 conv with the stride, no bias, then BN) where the block
// changes the shape ("option B"); null (identity) otherwise.
std::shared_ptr<nn::Sequential> shortcut(int64_t in, int64_t out, int stride) {
  if (stride == 1 && in == out) return nullptr;
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      conv(in, out, 1, stride, 0), std::make_shared<nn::BatchNorm2d>(out)});
}

// stage: `blocks` blocks, the first with `stride`; in_channels is updated to the output's.
template <typename Block>
std::shared_ptr<nn::Sequential> stage(int64_t& in_channels, int64_t width, int blocks, int stride,
                                      int expansion) {
  auto s = std::make_shared<nn::Sequential>();
  for (int i = 0; i < blocks; ++i) {
    s->push_back(std::make_shared<Block>(in_channels, width, i == 0 ? stride : 1));
    in_channels = width * expansion;
  }
  return s;
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t channels, int stride) {
  conv1_ = register_module("conv1", conv(in_channels, channels, 3, stride, 1));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(channels));
  conv2_ = register_module("conv2", conv(channels, channels, 3, 1, 1));
  bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(channels));
  if (auto d = shortcut(in_channels, channels, stride)) downsample_ = register_module("downsample", d);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor y = relu(bn1_->forward(conv1_->forward(x)));
  y = bn2_->forward(conv2_->forward(y));
  return relu(add(y, downsample_ ? downsample_->forward(x) : x));
}

Bottleneck::Bottleneck(int64_t in_channels, int64_t width, int stride) {
  const int64_t out = width * kExpansion;
  conv1_ = register_module("conv1", conv(in_channels, width, 1, 1, 0));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(width));
  conv2_ = register_module("conv2", conv(width, width, 3, stride, 1));
  bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(width));
  conv3_ = register_module("conv3", conv(width, out, 1, 1, 0));
  bn3_ = register_module("bn3", std::make_shared<nn::BatchNorm2d>(out));
  if (auto d = shortcut(in_channels, out, stride)) downsample_ = register_module("downsample", d);
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor y = relu(bn1_->forward(conv1_->forward(x)));
  y = relu(bn2_->forward(conv2_->forward(y)));
  y = bn3_->forward(conv3_->forward(y));
  return relu(add(y, downsample_ ? downsample_->forward(x) : x));
}

CifarResNet::CifarResNet(int n, int num_classes) {
  MTC_CHECK(n >= 1 && num_classes >= 1, "CifarResNet(n ", n, ", classes ", num_classes, ")");
  conv1_ = register_module("conv1", conv(3, 16, 3, 1, 1));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(16));
  int64_t channels = 16;
  const int64_t widths[3] = {16, 32, 64};
  for (int i = 0; i < 3; ++i) {
    stages_.push_back(register_module(absl::StrCat("layer", i + 1),
                                      stage<BasicBlock>(channels, widths[i], n, i == 0 ? 1 : 2, 1)));
  }
  fc_ = register_module("fc", std::make_shared<nn::Linear>(64, num_classes));
}

Tensor CifarResNet::forward(const Tensor& x) {
  Tensor y = relu(bn1_->forward(conv1_->forward(x)));  // (N, 16, H, W)
  for (auto& s : stages_) y = s->forward(y);           // (N, 64, H/4, W/4)
  return fc_->forward(global_avg_pool(y));
}

ImageNetResNet::ImageNetResNet(std::vector<int> layers, int num_classes) {
  MTC_CHECK(layers.size() == 4 && num_classes >= 1, "ImageNetResNet with ", layers.size(), " stages");
  conv1_ = register_module("conv1", conv(3, 64, 7, 2, 3));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(64));
  int64_t channels = 64;
  const int64_t widths[4] = {64, 128, 256, 512};
  for (int i = 0; i < 4; ++i) {
    stages_.push_back(register_module(
        absl::StrCat("layer", i + 1),
        stage<Bottleneck>(channels, widths[i], layers[i], i == 0 ? 1 : 2, Bottleneck::kExpansion)));
  }
  fc_ = register_module("fc", std::make_shared<nn::Linear>(512 * Bottleneck::kExpansion, num_classes));
}

Tensor ImageNetResNet::forward(const Tensor& x) {
  Tensor y = relu(bn1_->forward(conv1_->forward(x)));  // (N, 64, H/2, W/2)
  y = max_pool2d(y, Pool2dOptions::make(3, 2, 1));     // (N, 64, H/4, W/4)
  for (auto& s : stages_) y = s->forward(y);           // (N, 2048, H/32, W/32)
  return fc_->forward(global_avg_pool(y));
}

}  // namespace mtc::models
