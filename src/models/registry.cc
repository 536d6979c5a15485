// make_model: the table of model names and what each builds.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {
namespace {

struct Entry {
  const char* name;
  int cifar_n;  // > 0: CifarResNet with this n; 0: ResNet-50; -1: MLP; -2: VisionTransformer (vit_tiny);
                // -3: VGG-16 (Vgg with kVgg16); -4: the GPT language model (Gpt, ModelOptions::gpt);
                // -5, -6: DenseNet-121 (ImageNet, CIFAR stem); -7, -8: GoogLeNet (ImageNet, CIFAR); -9: UNet;
                // -10: the LSTM language model (LstmLm, ModelOptions::gpt); -11: TreeLstm (the same);
                // -12: the SPOS supernet (SposSupernet); -13: moe_gpt (Gpt with ModelOptions::moe)
};
constexpr int kVgg16Kind = -3, kGptKind = -4, kDenseNet = -5, kDenseNetCifar = -6, kGoogLeNet = -7,
              kGoogLeNetCifar = -8, kUNet = -9, kLstmKind = -10, kTreeLstmKind = -11, kSpos = -12,
              kMoeGptKind = -13;
constexpr int64_t kUNetWidth = 32;  // the common PyTorch port's 64 halved, for CIFAR-sized inputs
// imagenet_layout: kinds whose stem downsamples by 4 before the body, sized 224 by default.
constexpr bool imagenet_layout(int kind) { return kind == 0 || kind == kDenseNet || kind == kGoogLeNet; }
constexpr Entry kModels[] = {
    {"resnet20", 3},   {"resnet32", 5},     {"resnet44", 7}, {"resnet56", 9},
    {"resnet110", 18}, {"resnet1202", 200}, {"resnet50", 0}, {"mlp", -1},
    {"vit_tiny", -2},  {"vgg16", kVgg16Kind}, {"gpt", kGptKind},
    {"densenet121", kDenseNet}, {"densenet121_cifar", kDenseNetCifar},
    {"googlenet", kGoogLeNet},  {"googlenet_cifar", kGoogLeNetCifar}, {"unet", kUNet},
    {"lstm", kLstmKind}, {"treelstm", kTreeLstmKind}, {"spos", kSpos}, {"moe_gpt", kMoeGptKind},
};

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const Entry& e : kModels) out.emplace_back(e.name);
  return out;
}

bool is_language_model(const std::string& name) {
  return name == "gpt" || name == "moe_gpt" || name == "lstm" || name == "treelstm";
}

MoeConfig moe_gpt_config(const ModelOptions& o) {
  MoeConfig c = o.moe;
  if (c.experts == 0) c.experts = 4;
  return c;
}

std::string describe_language_model(const std::string& name, const GptConfig& c) {
  if (name == "gpt" || name == "moe_gpt") return c.describe();
  const std::string rest = absl::StrCat("hidden ", c.hidden, ", seq ", c.seq, ", vocab ", c.vocab);
  return name == "lstm" ? absl::StrCat(c.layers, " layers, ", rest) : rest;
}

namespace {

// find: the table's entry of `name`, or InvalidArgument listing the names.
absl::StatusOr<const Entry*> find(const std::string& name) {
  for (const Entry& e : kModels) {
    if (name == e.name) return &e;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", name, "': expected one of ", absl::StrJoin(model_names(), ", ")));
}

}  // namespace

absl::StatusOr<Shape> input_shape(const std::string& name, const ModelOptions& o) {
  absl::StatusOr<const Entry*> entry = find(name);
  if (!entry.ok()) return entry.status();
  const int kind = (*entry)->cifar_n;
  if (kind == kGptKind || kind == kMoeGptKind || kind == kLstmKind ||
      kind == kTreeLstmKind) {  // T token ids; the classes are the vocabulary
    MTC_RETURN_IF_ERROR(o.gpt.check(/*attention=*/kind == kGptKind || kind == kMoeGptKind));
    if (kind == kMoeGptKind) MTC_RETURN_IF_ERROR(moe_gpt_config(o).check());
    return Shape{o.gpt.seq};
  }
  if (o.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("number of classes ", o.num_classes, ": expected >= 1"));
  }
  if (o.image_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("image size ", o.image_size, ": expected >= 1"));
  }
  const int size = o.image_size > 0 ? o.image_size : imagenet_layout(kind) ? 224 : 32;
  if (imagenet_layout(kind) && size < 32) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " image size ", size, ": expected >= 32 (it downsamples by 32)"));
  }
  if ((kind == kDenseNetCifar || kind == kGoogLeNetCifar) && size < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " image size ", size, ": expected >= 8 (it downsamples by 8)"));
  }
  if (kind == kUNet && size % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unet image size ", size, ": expected a multiple of 16 (it pools by 2 four times)"));
  }
  if (kind == -2 && size % VisionTransformerConfig{}.patch != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " image size ", size,
                                                   ": expected a multiple of the patch size ",
                                                   VisionTransformerConfig{}.patch));
  }
  if (kind == kVgg16Kind && size % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("vgg16 image size ", size, ": expected a multiple of 32 (it downsamples by 32)"));
  }
  return Shape{3, size, size};
}

absl::StatusOr<Model> make_model(const std::string& name, const ModelOptions& o) {
  absl::StatusOr<Shape> shape = input_shape(name, o);
  if (!shape.ok()) return shape.status();
  const Entry& entry = **find(name);
  Model m;
  m.name = name;
  m.sample_shape = *shape;
  if (entry.cifar_n == kGptKind) {
    m.net = std::make_shared<Gpt>(o.gpt);
    return m;
  }
  if (entry.cifar_n == kMoeGptKind) {
    m.net = std::make_shared<Gpt>(o.gpt, moe_gpt_config(o), o.moe_ep);
    return m;
  }
  if (entry.cifar_n == kLstmKind) {
    m.net = std::make_shared<LstmLm>(o.gpt);
    return m;
  }
  if (entry.cifar_n == kTreeLstmKind) {
    m.net = std::make_shared<TreeLstm>(o.gpt);
    return m;
  }
  const int size = static_cast<int>((*shape)[1]);
  if (entry.cifar_n > 0) {
    m.net = std::make_shared<CifarResNet>(entry.cifar_n, o.num_classes);
  } else if (entry.cifar_n == 0) {
    m.net = std::make_shared<ImageNetResNet>(std::vector<int>{3, 4, 6, 3}, o.num_classes);
  } else if (entry.cifar_n == kVgg16Kind) {
    m.net = std::make_shared<Vgg>(kVgg16, o.num_classes);
  } else if (entry.cifar_n == kDenseNet || entry.cifar_n == kDenseNetCifar) {
    m.net = std::make_shared<DenseNet>(
        DenseNetConfig{.imagenet_stem = entry.cifar_n == kDenseNet, .num_classes = o.num_classes});
  } else if (entry.cifar_n == kGoogLeNet || entry.cifar_n == kGoogLeNetCifar) {
    m.net = std::make_shared<GoogLeNet>(entry.cifar_n == kGoogLeNet, o.num_classes);
  } else if (entry.cifar_n == kSpos) {
    m.net = std::make_shared<SposSupernet>(o.num_classes, size);
  } else if (entry.cifar_n == kUNet) {
    m.net = std::make_shared<UNet>(kUNetWidth, o.num_classes);
  } else if (entry.cifar_n == -2) {
    VisionTransformerConfig c;  // vit_tiny: D 128, 4 heads, 4 blocks, patch 4
    c.image_size = size;
    c.num_classes = o.num_classes;
    m.net = std::make_shared<VisionTransformer>(c);
  } else {
    for (int64_t h : o.mlp_hidden) {
      if (h < 1) return absl::InvalidArgumentError(absl::StrCat("mlp hidden width ", h, ": expected >= 1"));
    }
    m.net = std::make_shared<Mlp>(numel(m.sample_shape), o.mlp_hidden, o.num_classes);
  }
  return m;
}

}  // namespace mtc::models
