// Models for training and benchmarks: the CIFAR ResNets of He et al. (6n+2 layers, with
// projection shortcuts, "option B"), torchvision's ImageNet ResNet-50, an MLP, a small
// Vision Transformer (vit_tiny), VGG-16 with batch norm (CIFAR layout), a GPT-style
// decoder language model (gpt), an LSTM language model (lstm), a Tree-LSTM over
// data-dependent trees (treelstm), DenseNet-121 and GoogLeNet
// (ImageNet and CIFAR layouts) and a U-Net.
// make_model builds one by name on the current runtime; train_step runs one iteration. Parameter names follow
// torchvision ("conv1.weight", "layer1.0.bn2.running_var", "layer2.0.downsample.0.weight", "fc.bias"),
// timm for the ViT, and nanoGPT's for the GPT ("wte", "blocks.0.attn.q.weight", "ln_f.bias").
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "mtc/data.h"
#include "mtc/distributed.h"
#include "mtc/nn.h"
#include "mtc/optim.h"

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

// Vgg: VGG with batch norm in the common CIFAR layout. `config` lists the layers of
// `features`: a width w > 0 is conv3x3(pad 1, with bias)-BN-ReLU to w channels, 0 a 2x2
// max pool (stride 2). Then a global average pool (the 1x1 map itself at 32x32 after
// five pools) and the classifier Linear(last width, num_classes). Parameter names as
// torchvision's vgg16_bn: "features.0.weight" (conv), "features.1.running_mean" (BN),
// "classifier.weight". Input (N, 3, H, W).
class Vgg final : public nn::Module {
 public:
  Vgg(const std::vector<int>& config, int num_classes);
  Tensor forward(const Tensor& x) override;  // -> (N, num_classes)
  std::string type_name() const override { return "Vgg"; }

 private:
  std::shared_ptr<nn::Sequential> features_;
  std::shared_ptr<nn::Linear> classifier_;
};
// kVgg16: VGG-16's 13 convolutions and 5 pools (0): 14,728,266 parameters with 10 classes.
inline const std::vector<int> kVgg16 = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};

// GptConfig: a GPT-style decoder language model. The defaults are the tiny one for tests
// (gpt_config("tiny")); gpt_config("small") is GPT-2 small's size.
struct GptConfig {
  int layers = 2;         // decoder blocks L
  int64_t hidden = 64;    // width D
  int heads = 4;          // attention heads H (hidden % heads == 0)
  int64_t seq = 16;       // longest sequence T (the learned position embedding's rows)
  int vocab = 128;        // vocabulary V (token ids in [0, V))
  bool tied_head = true;  // the LM head is the token embedding (no weight of its own)
  // check: every field in range and (with attention: the GPT's, not the recurrent
  // models') heads dividing hidden; InvalidArgument naming the field and what was
  // expected otherwise.
  absl::Status check(bool attention = true) const;
  std::string describe() const;  // "2 layers, hidden 64, 4 heads, seq 16, vocab 128, tied head"
  // num_parameters: the count a Gpt of this configuration has, without building it.
  int64_t num_parameters() const;
};
// gpt_config: a named configuration: "tiny" (2 layers, D 64, 4 heads, T 16, V 128) or
// "small" (GPT-2 small: 12 layers, D 768, 12 heads, T 1024, V 50257, tied head:
// 124,439,808 parameters); another name is InvalidArgument listing these.
absl::StatusOr<GptConfig> gpt_config(const std::string& name);

// GptAttention: causal multi-head self-attention with separate projections, children q,
// k, v and proj, each Linear(D, D) with bias; head h is columns [h*d, (h+1)*d) of q, k and
// v (d = D / H): proj(scaled_dot_product_attention(q(x), k(x), v(x), H, mask)). `mask` is
// a causal_mask of at least the longest sequence, shared by the blocks.
class GptAttention final : public nn::Module {
 public:
  GptAttention(int64_t dim, int heads, Tensor mask, nn::NormalInit init = {});
  Tensor forward(const Tensor& x) override;  // x (N, T, D) -> (N, T, D)
  std::string type_name() const override { return "GptAttention"; }
  int heads;
  Tensor mask;  // (S, S), S >= T; not a parameter or buffer (the Gpt made it)
  std::shared_ptr<nn::Linear> q, k, v, proj;
};

// ---- mixture of experts (docs/dynamic-models.md) ----

// MoeConfig: a mixture-of-experts MLP of `experts` experts (0 in a Gpt: dense MLPs).
// Each token goes to its top_k experts by router probability: 1 is Switch's gating, 2
// GShard's. An expert takes at most C = ceil(capacity_factor * top_k * T / E) of a
// forward's T tokens, first choices before second ones, each in token order; a choice
// beyond C is dropped (it adds nothing: the block's residual carries the token on).
// dropless: no capacity, no drops. aux_alpha: the load-balancing loss's weight.
// bucket: an expert runs on its token count rounded up to a multiple of bucket (at least
// one bucket; with a capacity, at most C), the extra rows a token's copy whose output is
// multiplied by 0, so that the shapes, and TMA's iteration signatures, recur; bucket >= C
// gives every expert exactly C rows, GShard's fixed buffers. 0: the exact counts.
// groups: GShard's groups: a forward's T tokens are G contiguous groups of T/G, each
// routed with its own capacity ceil(capacity_factor * top_k * (T/G) / E) and its own
// load-balancing loss, the loss being their mean. N data-parallel ranks, each routing its
// own tokens, compute what one rank computes with groups = N.
struct MoeConfig {
  int experts = 0;
  int top_k = 1;
  double capacity_factor = 1.25;
  bool dropless = false;
  float aux_alpha = 0.01f;
  int64_t bucket = 0;
  int groups = 1;
  // check: experts >= 2, top_k 1 or 2 and at most experts, capacity_factor > 0, aux_alpha
  // >= 0, bucket >= 0, groups >= 1; InvalidArgument naming the field and what was
  // expected otherwise.
  absl::Status check() const;
  std::string describe() const;  // "4 experts, top-1, capacity factor 1.25, aux 0.01"
  // rows: the rows an expert that takes n tokens runs on (n rounded up by bucket).
  int64_t rows(int64_t n, int64_t capacity) const;
};
// MoeAssignment: the routing of one forward.
struct MoeAssignment {
  std::vector<std::vector<int32_t>> tokens;  // per expert: the tokens it takes, group by group, in order
  // f_i: per group, the share of its tokens whose first choice is i (groups x E)
  std::vector<double> first_share;
  int64_t dropped = 0;                       // choices beyond the capacity
  int64_t capacity = 0;                      // C of a group; 0 when dropless
  int64_t padded = 0;                        // rows run beyond the tokens (MoeConfig::bucket)
};
// moe_route: the routing of `tokens` tokens from their router probabilities (tokens x E,
// row-major), by MoeConfig's rules (tokens a multiple of groups); ties go to the lower
// expert.
MoeAssignment moe_route(std::span<const float> probs, int64_t tokens, const MoeConfig& c);
// moe_aux_loss: the load-balancing loss alpha * E * sum_i f_i * P_i, P_i the mean router
// probability of expert i over the tokens (probs (T, E), differentiable), f_i the first
// choices' shares (constants); with G groups (first_share G x E), the mean over the
// groups of each group's loss. 1 * alpha for perfectly balanced routing.
Tensor moe_aux_loss(const Tensor& probs, std::span<const double> first_share, float alpha);

// MoeMlp: a router Linear(D, E) without bias and softmax over the experts, and E experts,
// each a TransformerMlp(D, hidden). forward(x (..., D)): every expert runs on the rows of
// the tokens it takes (gathered with embedding), also when it takes none, so that every
// expert has a gradient every iteration; its output rows, times the router probability
// of that token and expert (not renormalised over the top_k), are added into the output
// rows of their tokens (scatter_add_rows). Reading the probabilities synchronises with
// the device once per forward. Children "router", "experts.0", ...
//
// Expert parallelism (`ep`, a communicator of N ranks, N dividing E): rank r holds
// experts [r*E/N, (r+1)*E/N) only (children "experts.i" by their global index; every rank
// draws all E experts' initial values, so each expert starts as on one rank). Each rank
// routes its own tokens; the ranks exchange their tokens per expert (all_gather of the
// counts, read on the host), send each expert's rows to its rank with the uneven
// all_to_all, run their experts on what they received (also on no rows) and send the
// outputs back the same way. An expert's gradient then sums what every rank's loss sent
// it: data parallel, given the experts as DataParallelOptions::local, divides it by N.
// Not with bucket.
class MoeMlp final : public nn::Module {
 public:
  MoeMlp(int64_t dim, int64_t hidden, const MoeConfig& c, nn::NormalInit init = {}, dist::CommPtr ep = nullptr);
  Tensor forward(const Tensor& x) override;  // (..., D) -> (..., D)
  // auxiliary_loss: the last forward's moe_aux_loss, handed over: the module keeps no
  // reference, so the term's graph holds no activations past the step.
  Tensor auxiliary_loss() override { return std::exchange(aux_, Tensor()); }
  std::string type_name() const override { return "MoeMlp"; }
  const MoeAssignment& routing() const { return routing_; }  // the last forward's
  MoeConfig config;
  std::shared_ptr<nn::Linear> router;
  std::vector<std::shared_ptr<nn::TransformerMlp>> experts;  // this rank's: first_expert, first_expert + 1, ...
  int first_expert = 0;
  dist::CommPtr ep;  // null: every expert here

 private:
  Tensor expert_parallel(const Tensor& flat, const Tensor& gates);
  Tensor aux_;
  MoeAssignment routing_;
};

// GptBlock: pre-LayerNorm decoder block, x = x + attn(ln1(x)); x = x + mlp(ln2(x)), the
// MLP fc1 = Linear(D, 4D), exact GELU, fc2 = Linear(4D, D). Children "ln1", "attn",
// "ln2", "mlp". With a MoeConfig of experts, a MoeMlp of such experts, child "moe", in
// place of the MLP.
class GptBlock final : public nn::Module {
 public:
  GptBlock(int64_t dim, int heads, Tensor mask, nn::NormalInit init = {}, const MoeConfig& moe = {},
           dist::CommPtr ep = nullptr);
  Tensor forward(const Tensor& x) override;  // x (N, T, D) -> (N, T, D)
  std::string type_name() const override { return "GptBlock"; }
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<GptAttention> attn;
  std::shared_ptr<nn::TransformerMlp> mlp;  // null with experts
  std::shared_ptr<MoeMlp> moe;              // null without
};

// Gpt: a GPT-2-style decoder LM. Token embedding wte (V, D) and learned position
// embedding wpe (T, D), L GptBlocks, final LayerNorm ln_f, and the LM head: tied, logits
// = h wte^T; untied, lm_head = Linear(D, V) without bias. GPT-2's initialisation: every
// Linear and embedding weight ~ N(0, 0.02^2), biases 0, LayerNorms 1 and 0, drawn in
// registration order from the runtime's seed. Parameter names: "wte", "wpe",
// "blocks.0.ln1.weight", "blocks.0.attn.q.weight", ..., "blocks.0.mlp.fc2.bias",
// "ln_f.weight", "lm_head.weight" (untied). No dropout. With a MoeConfig of experts (the
// model moe_gpt), every other block (1, 3, ...) has a MoeMlp in place of its MLP, as
// GShard and Switch place them.
class Gpt final : public nn::Module {
 public:
  explicit Gpt(const GptConfig& c, const MoeConfig& moe = {}, dist::CommPtr ep = nullptr);
  // x: i32 token ids (N, T), 1 <= T <= config.seq -> logits (N, T, V).
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Gpt"; }
  GptConfig config;
  MoeConfig moe;
  Tensor wte, wpe;
  Tensor mask;  // causal_mask(config.seq), shared by the blocks
  // moe_blocks: the MoeMlps, in block order (empty for a dense GPT).
  std::vector<std::shared_ptr<MoeMlp>> moe_blocks() const;

 private:
  std::shared_ptr<nn::Sequential> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Linear> lm_head_;  // null when tied
};

// ---- the memory-hungry families (docs/models.md): concatenated features, skips ----

// ConvBnRelu: conv (no bias) - BN - ReLU, torchvision's BasicConv2d (children "conv",
// "bn"; BN eps as given).
class ConvBnRelu final : public nn::Module {
 public:
  ConvBnRelu(int64_t in, int64_t out, int kernel, int stride = 1, int padding = 0, float eps = 1e-5f);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ConvBnRelu"; }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
};

// DenseNet (Huang et al.; torchvision's layout and names): dense blocks in which layer i
// reads the concatenation of the block's input and every earlier layer's output
// (BN-ReLU-conv1x1 to bn_size * growth, BN-ReLU-conv3x3 to growth), each concatenation a
// new tensor as torchvision's default makes it (memory quadratic in the layers); between
// blocks a transition BN-ReLU-conv1x1 (halving the channels)-avgpool 2x2; then BN, ReLU,
// global average pool and a Linear classifier. The ImageNet stem is conv7x7/2 (3 -> 64)
// - BN - ReLU - maxpool 3x3/2 pad 1; the CIFAR stem a conv3x3 (3 -> 64), no pool.
// DenseNet-121: blocks {6, 12, 24, 16}, growth 32: 7,978,856 parameters with the ImageNet
// stem and 1000 classes, as torchvision's densenet121.
struct DenseNetConfig {
  std::vector<int> blocks = {6, 12, 24, 16};
  int growth = 32;
  int64_t init_channels = 64;
  int bn_size = 4;
  bool imagenet_stem = true;
  int num_classes = 10;
};
class DenseNet final : public nn::Module {
 public:
  explicit DenseNet(const DenseNetConfig& c);
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, num_classes)
  std::string type_name() const override { return "DenseNet"; }

 private:
  bool imagenet_stem_;
  std::shared_ptr<nn::Conv2d> conv0_;
  std::shared_ptr<nn::BatchNorm2d> norm0_, norm5_;
  std::vector<std::shared_ptr<nn::Module>> stages_;  // denseblock1, transition1, ..., denseblock4
  std::shared_ptr<nn::Linear> classifier_;
};

// GoogLeNet (Szegedy et al.; torchvision's layout without the auxiliary heads): inception
// modules whose four branches (1x1; 1x1-3x3; 1x1-3x3; maxpool 3x3-1x1, each conv a
// ConvBnRelu with eps 1e-3) are concatenated, 3a-3b, maxpool, 4a-4e, maxpool, 5a-5b,
// global average pool, dropout 0.2, Linear(1024, num_classes). The ImageNet stem is
// conv7x7/2 (3 -> 64), maxpool 3x3/2, conv1x1 (64), conv3x3 (192), maxpool 3x3/2 (the
// pools pad 1 where torchvision rounds up: the same shapes); the CIFAR stem one conv3x3
// (3 -> 192) as in the common CIFAR port, and its pools 3x3/2 pad 1. 6,624,904 parameters
// with the ImageNet stem and 1000 classes, as torchvision's googlenet(aux_logits=False).
class GoogLeNet final : public nn::Module {
 public:
  GoogLeNet(bool imagenet_stem, int num_classes);
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, num_classes)
  std::string type_name() const override { return "GoogLeNet"; }

 private:
  std::shared_ptr<nn::Sequential> stem_, body_;
  std::shared_ptr<nn::Linear> fc_;
};

// UNet (Ronneberger et al., with padded convs and batch norm as in the common PyTorch
// port with bilinear=False replaced by nearest upsampling): an encoder of DoubleConvs
// (conv3x3-BN-ReLU twice) at widths w, 2w, 4w, 8w, 8w with 2x2 max pools, a decoder that
// upsamples (nearest, 2x), concatenates the encoder's feature map of the same size (the
// skip) and applies a DoubleConv, and a 1x1 conv to num_classes score maps. mtc-train's
// data has one label per image, so the scores are averaged over the image (a global
// average pool) into (N, num_classes); the memory profile is the segmentation net's.
// Input height and width: multiples of 16.
class UNet final : public nn::Module {
 public:
  UNet(int64_t width, int num_classes);
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, num_classes)
  std::string type_name() const override { return "UNet"; }

 private:
  std::vector<std::shared_ptr<nn::Sequential>> down_;  // inc, down1 .. down4
  std::vector<std::shared_ptr<nn::Sequential>> up_;    // up1 .. up4 (after the concatenation)
  std::shared_ptr<nn::Conv2d> outc_;
};
// upsample_nearest2x: (N, C, H, W) -> (N, C, 2H, 2W), each value repeated in a 2x2
// square (torch's Upsample(scale_factor=2, mode="nearest")), made of reshapes and
// concatenations, so its backward is theirs.
Tensor upsample_nearest2x(const Tensor& x);

// LstmLm: an LSTM language model: token embedding (V, D) ~ N(0, 1) as torch's
// nn.Embedding, `layers` LSTM layers of width D (torch's nn.LSTM: per layer weight_ih
// (4D, D), weight_hh (4D, D), bias_ih and bias_hh (4D), all ~ U(-1/sqrt(D), 1/sqrt(D)),
// gates in the order i, f, g, o), and a Linear(D, V) head: logits (N, T, V) for i32
// token ids (N, T). It reads the language model's configuration (GptConfig's layers,
// hidden, seq and vocab; heads and tied_head do not apply). The recurrence is unrolled
// op by op: each step's gates are a matmul of h with weight_hh added to the input's
// projection, made for all steps at once, then split, sigmoid and tanh, so a sequence of
// T tokens is about 12 T small ops per layer, each step's state kept for the backward.
class LstmLm final : public nn::Module {
 public:
  explicit LstmLm(const GptConfig& c);
  Tensor forward(const Tensor& x) override;  // (N, T) i32 -> (N, T, V)
  std::string type_name() const override { return "LstmLm"; }
  GptConfig config;
  Tensor embed;

 private:
  std::vector<Tensor> w_ih_, w_hh_, b_ih_, b_hh_;
  std::shared_ptr<nn::Linear> head_;
};

// TreeLstm: a data-dependent recursive net (the binary Tree-LSTM of Tai et al.) shaped as
// a language model. For each batch a binary tree over the T positions is built from the
// batch's first sequence: a span splits at its largest token (ties: the first), so the
// structure, and the op graph, change with every batch. Leaves are token embeddings
// (c = 0); an inner node with children (hl, cl), (hr, cr) computes i, fl, fr, o, u from
// one Linear(2D, 5D) of [hl, hr], c = s(i) tanh(u) + s(fl) cl + s(fr) cr, h = s(o) tanh(c).
// Position t's logits are head(h of t's lowest inner node + h of the root): (N, T, V).
// Reads the language model's configuration (hidden, seq, vocab; layers, heads and
// tied_head do not apply). A T of 1 has no inner node: head(embedding).
class TreeLstm final : public nn::Module {
 public:
  explicit TreeLstm(const GptConfig& c);
  Tensor forward(const Tensor& x) override;  // (N, T) i32 -> (N, T, V); reads x's first row
  std::string type_name() const override { return "TreeLstm"; }
  GptConfig config;
  Tensor embed;
  std::shared_ptr<nn::Linear> cell, head;
  // tree_of: the split points of a sequence's tree, as the forward builds it: for each
  // inner node in the order made (children first), its span [begin, end) and split.
  struct Node {
    int64_t begin, split, end;
  };
  static std::vector<Node> tree_of(std::span<const int32_t> tokens);
};

// ---- SPOS: a NAS supernet, one path per iteration ----
// SposSupernet (Guo et al., "Single Path One-Shot Neural Architecture Search with Uniform
// Sampling", ECCV 2020; the official ShuffleNetV2 search space and layer names): a first
// conv3x3/2 (3 -> 16), BN, ReLU; 20 choice blocks in stages of 4, 4, 8 and 4 with 64, 160,
// 320 and 640 output channels, the first block of each stage of stride 2; each block holds
// four units, of which a path runs one: ShuffleNetV2 units with 3x3, 5x5 and 7x7
// depthwise kernels (choices 0-2) and the Xception-like unit (choice 3); then conv1x1 to
// 1024, BN, ReLU, global average pool, dropout 0.1 and Linear(1024, classes) without bias.
// Every batch norm is without affine parameters (the supernet's). forward() runs the
// blocks of path(); units off the path get no gradient, so the optimizer leaves them (and
// their state) alone.
inline constexpr int kSposBlocks = 20, kSposChoices = 4;
class SposSupernet final : public nn::Module {
 public:
  SposSupernet(int num_classes, int image_size);
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, num_classes)
  std::string type_name() const override { return "SposSupernet"; }
  // set_path: the choice of every block for the forwards that follow; InvalidArgument
  // (check_spos_path) otherwise, leaving the path as it was.
  absl::Status set_path(std::span<const int> path);
  std::span<const int> path() const { return path_; }
  // flops: multiply-adds of the convolutions and the classifier of the subnet `path` at
  // this supernet's image size (the measure of the paper's FLOPs-range sampler).
  int64_t flops(std::span<const int> path) const;
  // The modules a stand-alone subnet shares (SposSubnet).
  std::shared_ptr<nn::Sequential> first_conv() const { return first_conv_; }
  std::shared_ptr<nn::Module> choice(int block, int c) const { return choices_[block][c]; }
  std::shared_ptr<nn::Sequential> conv_last() const { return conv_last_; }
  std::shared_ptr<nn::Linear> classifier() const { return classifier_; }

 private:
  int image_size_;
  std::array<int, kSposBlocks> path_;
  std::shared_ptr<nn::Sequential> first_conv_, conv_last_;
  std::array<std::array<std::shared_ptr<nn::Module>, kSposChoices>, kSposBlocks> choices_;
  std::shared_ptr<nn::Linear> classifier_;
};
// SposSubnet: the stand-alone network of one path: the supernet's first conv, the units
// of the path in sequence, its last conv and classifier, the same modules (so the same
// weights). It computes what the supernet computes with that path set.
class SposSubnet final : public nn::Module {
 public:
  SposSubnet(const SposSupernet& super, std::span<const int> path);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SposSubnet"; }

 private:
  std::shared_ptr<nn::Sequential> first_conv_, features_, conv_last_;
  std::shared_ptr<nn::Linear> classifier_;
};
// check_spos_path: 20 choices, each in 0-3; InvalidArgument naming the path, the block
// and what was expected otherwise. parse_spos_path: "0,3,1,..." checked so.
absl::Status check_spos_path(std::span<const int> path);
absl::StatusOr<std::vector<int>> parse_spos_path(const std::string& text);
// SposSampler: one path per next(), drawn from a generator seeded by `seed` (the same on
// every rank, so every rank runs the same path): each block's choice uniform in 0-3, or,
// given a supernet and a FLOPs range, uniform among the paths whose flops() lie in
// [min_flops, max_flops] (0: no bound), by rejection as the paper's sampler; no path in
// range within 10,000 draws is InvalidArgument.
class SposSampler {
 public:
  explicit SposSampler(uint64_t seed, const SposSupernet* net = nullptr, int64_t min_flops = 0, int64_t max_flops = 0);
  absl::StatusOr<std::vector<int>> next();
  // state / set_state: the generator's, for a checkpoint (data::Rng::state).
  std::string state() const { return rng_.state(); }
  absl::Status set_state(const std::string& text) { return rng_.set_state(text); }

 private:
  static constexpr int kMaxAttempts = 10000;
  data::Rng rng_;
  const SposSupernet* net_;
  int64_t min_flops_, max_flops_;
};

struct ModelOptions {
  int num_classes = 10;
  // image_size: the input's height and width; 0 picks the model's own (224 for resnet50,
  // densenet121 and googlenet, 32 for the others).
  int image_size = 0;
  std::vector<int64_t> mlp_hidden = {512, 512};
  // gpt: the language model's configuration (num_classes and image_size do not apply
  // to it: its classes are the vocabulary, its input T token ids).
  GptConfig gpt = {};
  // moe: moe_gpt's experts (4 when experts is 0); the other models ignore it.
  MoeConfig moe = {};
  // moe_ep: moe_gpt's experts spread over this communicator's ranks (expert parallelism).
  dist::CommPtr moe_ep = nullptr;
};

// Model: a network and the shape of one input sample, e.g. [3, 32, 32].
struct Model {
  std::string name;
  std::shared_ptr<nn::Module> net;
  Shape sample_shape;
};

// moe_gpt_config: the experts moe_gpt builds with: o.moe, 4 experts when it names none.
MoeConfig moe_gpt_config(const ModelOptions& o);
// model_names: what make_model knows, e.g. "resnet20".
std::vector<std::string> model_names();
// is_language_model: whether model `name` takes i32 token ids (N, T) with next-token
// labels (N, T) (data::SyntheticTokens) rather than images with one label each ("gpt").
bool is_language_model(const std::string& name);
// describe_language_model: what of `c` language model `name` uses: the GPT's whole
// configuration, the LSTM's without heads and head tying, the Tree-LSTM's width, sequence
// and vocabulary ("hidden 256, seq 64, vocab 256").
std::string describe_language_model(const std::string& name, const GptConfig& c);
// input_shape: the shape of one input sample of model `name` with these options, e.g.
// [3, 32, 32] (for gpt [T], T token ids), checked as make_model checks them, without building anything (no runtime
// needed): a tool sizes its data before it builds the model.
absl::StatusOr<Shape> input_shape(const std::string& name, const ModelOptions& o = {});
// make_model: builds a model on the current runtime. An unknown name, or a non-positive
// number of classes or image size, is InvalidArgument listing what is accepted.
absl::StatusOr<Model> make_model(const std::string& name, const ModelOptions& o = {});

// token_input_ok: whether x can be a language model's input, i32 token ids (N, T) with
// 1 <= T <= seq (or is undefined or poisoned: the model's first op reports or passes that
// on); otherwise records "MODEL: input ...: expected ..." on x's interpreter and says no.
bool token_input_ok(const Tensor& x, int64_t seq, const char* model);
// read_in_forward, read_in_forward_i32: x's values on the host, for a forward whose
// shapes depend on them (a mixture of experts' routing, a Tree-LSTM's tree). Reading
// synchronises and returns the interpreter's first failure, which clears it; on a
// failure it is recorded again, so that the loss reports it and not a later op's
// "never produced". The caller returns a tensor of its own and issues nothing more.
absl::StatusOr<std::vector<float>> read_in_forward(const Tensor& x);
absl::StatusOr<std::vector<int32_t>> read_in_forward_i32(const Tensor& x);

// cross_entropy_loss: the mean cross-entropy of a classifier's logits (N, C) with labels
// (N), or of a language model's logits (N, T, V) with next-token labels (N, T), seen as
// (N*T, V) and (N*T): the mean over every position of every sequence.
Tensor cross_entropy_loss(const Tensor& logits, const Tensor& labels);

// train_step: one training iteration on a classification or language-model batch:
// zero_grad, forward, cross_entropy_loss plus the model's auxiliary_loss (a mixture of
// experts' load balancing; the returned loss includes it), backward, optimizer step. Returns the loss without waiting for it:
// loss.item() synchronises and reports any failure inside the iteration. With `dp`, the
// gradients are averaged over the ranks (dp->finish()) before the step. A caller whose
// gradient reduction is its own (DTP) passes hooks: after_forward runs once the forward is
// issued (under --dtp=auto the forward settles where each parameter lives, and the
// reducer follows), and finish runs after the backward instead of dp->finish().
struct StepHooks {
  std::function<absl::Status()> after_forward;
  std::function<void()> finish;
};
absl::StatusOr<Tensor> train_step(nn::Module& net, optim::Optimizer& opt, const data::Batch& batch,
                                  dist::DataParallel* dp = nullptr, const StepHooks* hooks = nullptr);

}  // namespace mtc::models
