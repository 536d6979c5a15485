// Models for training and benchmarks: the CIFAR ResNets of He et al. (6n+2 layers, with
// projection shortcuts, "option B"), torchvision's ImageNet ResNet-50, an MLP, and a small
// Vision Transformer (vit_tiny).
// make_model builds one by name on the current runtime; train_step runs one iteration. Parameter names follow
// torchvision ("conv1.weight", "layer1.0.bn2.running_var", "layer2.0.downsample.0.weight", "fc.bias"),
// and timm for the ViT.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mtc/data.h"
#include "mtc/nn.h"
#include "mtc/optim.h"

namespace mtc::dist {
class DataParallel;
}

namespace mtc::models {

// BasicBlock: conv3x3(stride)-BN-ReLU-conv3x3-BN, plus the shortcut (1x1 conv with the
// stride + BN when the shape changes, else identity), then ReLU. Expansion 1.
class BasicBlock final : public nn::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t channels, int stride);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BasicBlock"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Sequential> downsample_;  // null: identity
};

// Bottleneck: conv1x1-BN-ReLU, conv3x3(stride)-BN-ReLU, conv1x1 (x4 channels)-BN, plus
// the shortcut, then ReLU (torchvision's ResNet v1.5: the stride is on the 3x3).
class Bottleneck final : public nn::Module {
 public:
  static constexpr int kExpansion = 4;
  Bottleneck(int64_t in_channels, int64_t width, int stride);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Bottleneck"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<nn::Sequential> downsample_;
};

// CifarResNet: ResNet-(6n+2). conv3x3(3->16)-BN-ReLU; stages of n BasicBlocks with 16,
// 32, 64 channels (stride 2 at the first block of stages 2 and 3); global average pool;
// Linear(64, num_classes). Input (N, 3, H, W); 32x32 for CIFAR.
class CifarResNet final : public nn::Module {
 public:
  CifarResNet(int n, int num_classes);
  Tensor forward(const Tensor& x) override;  // -> (N, num_classes)
  std::string type_name() const override { return "CifarResNet"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<nn::Sequential>> stages_;  // "layer1" .. "layer3"
  std::shared_ptr<nn::Linear> fc_;
};

// ImageNetResNet: torchvision's layout with Bottleneck blocks: conv7x7/2(3->64)-BN-ReLU,
// maxpool 3x3/2 pad 1, four stages of `layers[i]` blocks (widths 64, 128, 256, 512,
// stride 2 from stage 2 on), global average pool, Linear(2048, num_classes). Any input
// size from 32x32 up (the pool is global). ResNet-50 is layers {3, 4, 6, 3}.
class ImageNetResNet final : public nn::Module {
 public:
  ImageNetResNet(std::vector<int> layers, int num_classes);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ImageNetResNet"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<nn::Sequential>> stages_;  // "layer1" .. "layer4"
  std::shared_ptr<nn::Linear> fc_;
};

// Mlp: flatten, then Linear-ReLU for each hidden width, then Linear to num_classes.
class Mlp final : public nn::Module {
 public:
  Mlp(int64_t in_features, const std::vector<int64_t>& hidden, int num_classes);
  Tensor forward(const Tensor& x) override;  // x (N, ...) -> (N, num_classes)
  std::string type_name() const override { return "Mlp"; }

 private:
  std::shared_ptr<nn::Sequential> layers_;
};

// VisionTransformerConfig: a ViT for small images; vit_tiny is the defaults.
struct VisionTransformerConfig {
  int image_size = 32;  // square input, a multiple of patch
  int patch = 4;        // patch side: (image_size / patch)^2 tokens
  int64_t dim = 128;    // token width D
  int depth = 4;        // encoder blocks L
  int heads = 4;        // attention heads H (dim % heads == 0)
  int mlp_ratio = 4;    // MLP hidden width mlp_ratio * D
  int num_classes = 10;
};

// VisionTransformer: patch embedding by a conv with kernel = stride = patch (3 -> D, with
// bias), plus a learned positional embedding (1, T, D) ~ N(0, 0.02^2); `depth` pre-norm
// TransformerBlocks; a final LayerNorm; the mean over the T tokens; Linear(D, classes).
// No class token, no dropout. Input (N, 3, image_size, image_size). Parameter names in
// timm's style ("pos_embed", "blocks.0.norm1.weight", "blocks.0.attn.qkv.weight",
// "blocks.0.mlp.fc1.weight", "norm.bias", "head.weight"), except that the patch conv is
// "patch_embed.weight" where timm has "patch_embed.proj.weight".
class VisionTransformer final : public nn::Module {
 public:
  explicit VisionTransformer(const VisionTransformerConfig& c);
  Tensor forward(const Tensor& x) override;  // -> (N, num_classes)
  std::string type_name() const override { return "VisionTransformer"; }
  VisionTransformerConfig config;

 private:
  std::shared_ptr<nn::Conv2d> patch_embed_;
  Tensor pos_embed_;
  std::shared_ptr<nn::Sequential> blocks_;
  std::shared_ptr<nn::LayerNorm> norm_;
  std::shared_ptr<nn::Linear> head_;
};

struct ModelOptions {
  int num_classes = 10;
  // image_size: the input's height and width; 0 picks the model's own (32 for the CIFAR
  // ResNets, the MLP and vit_tiny, 224 for resnet50).
  int image_size = 0;
  std::vector<int64_t> mlp_hidden = {512, 512};
};

// Model: a network and the shape of one input sample, e.g. [3, 32, 32].
struct Model {
  std::string name;
  std::shared_ptr<nn::Module> net;
  Shape sample_shape;
};

// model_names: what make_model knows, e.g. "resnet20".
std::vector<std::string> model_names();
// input_shape: the shape of one input sample of model `name` with these options, e.g.
// [3, 32, 32], checked as make_model checks them, without building anything (no runtime
// needed): a tool sizes its data before it builds the model.
absl::StatusOr<Shape> input_shape(const std::string& name, const ModelOptions& o = {});
// make_model: builds a model on the current runtime. An unknown name, or a non-positive
// number of classes or image size, is InvalidArgument listing what is accepted.
absl::StatusOr<Model> make_model(const std::string& name, const ModelOptions& o = {});

// train_step: one training iteration on a classification batch: zero_grad, forward,
// cross_entropy, backward, optimizer step. Returns the loss without waiting for it:
// loss.item() synchronises and reports any failure inside the iteration. With `dp`, the
// gradients are averaged over the ranks (dp->finish()) before the step.
absl::StatusOr<Tensor> train_step(nn::Module& net, optim::Optimizer& opt, const data::Batch& batch,
                                  dist::DataParallel* dp = nullptr);

}  // namespace mtc::models
