// VisionTransformer: a small ViT classifier (patch conv, learned positional embedding,
// pre-norm encoder blocks, final LayerNorm, mean over tokens, linear head).
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {

VisionTransformer::VisionTransformer(const VisionTransformerConfig& c) : config(c) {
  MTC_CHECK(c.patch >= 1 && c.image_size >= c.patch && c.image_size % c.patch == 0 && c.dim >= 1 &&
                c.depth >= 0 && c.heads >= 1 && c.dim % c.heads == 0 && c.num_classes >= 1,
            "VisionTransformer(image ", c.image_size, ", patch ", c.patch, ", dim ", c.dim, ", depth ", c.depth,
            ", heads ", c.heads, ", classes ", c.num_classes, ")");
  const int64_t side = c.image_size / c.patch;
  const Shape pos{1, side * side, c.dim};
  pos_embed_ = register_parameter("pos_embed", nn::parameter(pos, nn::normal_values(numel(pos), 0.02f)));
  patch_embed_ = register_module(
      "patch_embed", std::make_shared<nn::Conv2d>(nn::Conv2dConfig{
                         .in_channels = 3, .out_channels = c.dim, .kernel = c.patch, .stride = c.patch}));
  blocks_ = register_module("blocks", std::make_shared<nn::Sequential>());
  for (int i = 0; i < c.depth; ++i) blocks_->push_back(std::make_shared<nn::TransformerBlock>(c.dim, c.heads, c.mlp_ratio));
  norm_ = register_module("norm", std::make_shared<nn::LayerNorm>(c.dim));
  head_ = register_module("head", std::make_shared<nn::Linear>(c.dim, c.num_classes));
}

Tensor VisionTransformer::forward(const Tensor& x) {
  Tensor y = patch_embed_->forward(x);    // (N, D, S/p, S/p)
  y = transpose(flatten(y, 2), 1, 2);     // (N, T, D), T = (S/p)^2
  y = add(y, pos_embed_);                 // broadcast over N
  y = norm_->forward(blocks_->forward(y));
  return head_->forward(mean(y, {1}));    // mean over tokens: (N, D) -> (N, classes)
}

}  // namespace mtc::models
