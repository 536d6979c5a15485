// SPOS: the single-path one-shot supernet over the ShuffleNetV2 search space (Guo et al.,
// ECCV 2020, as the official code builds it), its stand-alone subnets, the path text and
// the path sampler. See include/mtc/models.h.
#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {
namespace {

constexpr int kStageRepeats[4] = {4, 4, 8, 4};
constexpr int64_t kStageOut[4] = {64, 160, 320, 640};
constexpr int64_t kFirst = 16, kLast = 1024;

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int kernel, int stride = 1, int groups = 1) {
  return std::make_shared<nn::Conv2d>(nn::Conv2dConfig{.in_channels = in,
                                                       .out_channels = out,
                                                       .kernel = kernel,
                                                       .stride = stride,
                                                       .padding = kernel / 2,
                                                       .groups = groups,
                                                       .bias = false});
}
// The supernet's batch norm has no affine parameters: its statistics differ per path.
std::shared_ptr<nn::BatchNorm2d> bn(int64_t c) { return std::make_shared<nn::BatchNorm2d>(c, 1e-5f, 0.1f, false); }
std::shared_ptr<nn::ReLU> relu_layer() { return std::make_shared<nn::ReLU>(); }
using Layers = std::vector<std::shared_ptr<nn::Module>>;

// classify: the supernet's and a subnet's last layers on the last block's output: conv_last,
// global average pool, dropout 0.1, classifier.
Tensor classify(nn::Sequential& conv_last, nn::Linear& classifier, const Tensor& features, bool training) {
  return classifier.forward(dropout(global_avg_pool(conv_last.forward(features)), 0.1f, training));
}

// conv_flops: multiply-adds of a conv with `out_hw` output pixels.
int64_t conv_flops(int64_t in, int64_t out, int kernel, int groups, int64_t out_hw) {
  return out * (in / groups) * kernel * kernel * out_hw;
}

// ChoiceUnit: one of a choice block's four units. stride 1: the input's channels are
// shuffled into two halves (channel_shuffle with C/2 groups: the even channels, then the
// odd ones, as the official code's reshape-permute); the first half passes through, the
// second goes through the main branch; the two are concatenated. stride 2: the whole
// input goes through the projection branch (dw k x k / 2, BN, pw, BN, ReLU) and the main
// branch, concatenated. Main branch, ShuffleNetV2 unit (choices 0-2, kernel 3, 5, 7): pw
// (inp -> mid), BN, ReLU, dw k x k, BN, pw (mid -> oup - inp), BN, ReLU. Xception-like
// unit (choice 3): three dw 3x3 - BN - pw - BN - ReLU, the first dw with the stride.
class ChoiceUnit final : public nn::Module {
 public:
  ChoiceUnit(int64_t inp, int64_t oup, int choice, int stride) : stride_(stride), inp_(inp) {
    const int64_t mid = oup / 2, outputs = oup - inp;
    Layers main;
    if (choice < 3) {
      const int k = 3 + 2 * choice;
      main = {conv(inp, mid, 1), bn(mid), relu_layer(), conv(mid, mid, k, stride, static_cast<int>(mid)), bn(mid),
              conv(mid, outputs, 1), bn(outputs), relu_layer()};
      kernel_ = k;
    } else {
      main = {conv(inp, inp, 3, stride, static_cast<int>(inp)), bn(inp), conv(inp, mid, 1), bn(mid), relu_layer(),
              conv(mid, mid, 3, 1, static_cast<int>(mid)), bn(mid), conv(mid, mid, 1), bn(mid), relu_layer(),
              conv(mid, mid, 3, 1, static_cast<int>(mid)), bn(mid), conv(mid, outputs, 1), bn(outputs), relu_layer()};
      kernel_ = 3;
    }
    main_ = register_module("branch_main", std::make_shared<nn::Sequential>(std::move(main)));
    if (stride == 2) {
      proj_ = register_module("branch_proj", std::make_shared<nn::Sequential>(Layers{
                                                 conv(inp, inp, kernel_, 2, static_cast<int>(inp)), bn(inp),
                                                 conv(inp, inp, 1), bn(inp), relu_layer()}));
    }
    choice_ = choice;
    mid_ = mid;
    outputs_ = outputs;
  }
  Tensor forward(const Tensor& x) override {
    if (!x.defined() || x.poisoned() || x.ndim() != 4) return x;  // an earlier op's failure is recorded already
    if (stride_ == 2) {
      const Tensor parts[] = {proj_->forward(x), main_->forward(x)};
      return concat(parts, 1);
    }
    const int64_t c = x.shape()[1];
    const Tensor shuffled = channel_shuffle(x, static_cast<int>(c / 2));
    const Tensor parts[] = {slice(shuffled, 1, 0, c / 2), main_->forward(slice(shuffled, 1, c / 2, c))};
    return concat(parts, 1);
  }
  std::string type_name() const override { return choice_ < 3 ? "ShuffleNetV2Unit" : "ShuffleXceptionUnit"; }
  int stride() const { return stride_; }
  // flops: multiply-adds at an input of hw x hw pixels.
  int64_t flops(int64_t hw) const {
    const int64_t out = (hw + stride_ - 1) / stride_, out_hw = out * out, in_hw = hw * hw;
    int64_t f = 0;
    if (choice_ < 3) {
      f = conv_flops(inp_, mid_, 1, 1, in_hw) + conv_flops(mid_, mid_, kernel_, static_cast<int>(mid_), out_hw) +
          conv_flops(mid_, outputs_, 1, 1, out_hw);
    } else {
      f = conv_flops(inp_, inp_, 3, static_cast<int>(inp_), out_hw) + conv_flops(inp_, mid_, 1, 1, out_hw) +
          conv_flops(mid_, mid_, 3, static_cast<int>(mid_), out_hw) + conv_flops(mid_, mid_, 1, 1, out_hw) +
          conv_flops(mid_, mid_, 3, static_cast<int>(mid_), out_hw) + conv_flops(mid_, outputs_, 1, 1, out_hw);
    }
    if (stride_ == 2) {
      f += conv_flops(inp_, inp_, kernel_, static_cast<int>(inp_), out_hw) + conv_flops(inp_, inp_, 1, 1, out_hw);
    }
    return f;
  }

 private:
  int stride_;
  int64_t inp_, mid_ = 0, outputs_ = 0;
  int kernel_ = 3, choice_ = 0;
  std::shared_ptr<nn::Sequential> main_, proj_;
};

std::string path_text(std::span<const int> path) { return absl::StrJoin(path, ","); }

}  // namespace

SposSupernet::SposSupernet(int num_classes, int image_size) : image_size_(image_size) {
  MTC_CHECK(num_classes >= 1, "SposSupernet with ", num_classes, " classes");
  MTC_CHECK(image_size >= 1, "SposSupernet at image size ", image_size);
  first_conv_ = register_module("first_conv", std::make_shared<nn::Sequential>(
                                                  Layers{conv(3, kFirst, 3, 2), bn(kFirst), relu_layer()}));
  int64_t in = kFirst;
  int block = 0;
  for (int stage = 0; stage < 4; ++stage) {
    for (int i = 0; i < kStageRepeats[stage]; ++i, ++block) {
      const int stride = i == 0 ? 2 : 1;
      const int64_t inp = i == 0 ? in : kStageOut[stage] / 2;
      for (int c = 0; c < kSposChoices; ++c) {
        choices_[block][c] =
            register_module(absl::StrCat("features.", block, ".", c),
                            std::static_pointer_cast<nn::Module>(std::make_shared<ChoiceUnit>(inp, kStageOut[stage], c, stride)));
      }
    }
    in = kStageOut[stage];
  }
  conv_last_ = register_module("conv_last", std::make_shared<nn::Sequential>(
                                                Layers{conv(in, kLast, 1), bn(kLast), relu_layer()}));
  classifier_ = register_module("classifier", std::make_shared<nn::Linear>(kLast, num_classes, /*bias=*/false));
  path_.fill(0);
}

absl::Status SposSupernet::set_path(std::span<const int> path) {
  MTC_RETURN_IF_ERROR(check_spos_path(path));
  std::copy(path.begin(), path.end(), path_.begin());
  return absl::OkStatus();
}

Tensor SposSupernet::forward(const Tensor& x) {
  Tensor y = first_conv_->forward(x);
  for (int b = 0; b < kSposBlocks; ++b) y = choices_[b][path_[b]]->forward(y);
  return classify(*conv_last_, *classifier_, y, is_training());
}

int64_t SposSupernet::flops(std::span<const int> path) const {
  MTC_CHECK(check_spos_path(path).ok(), "SposSupernet::flops of path ", path_text(path));
  int64_t hw = (image_size_ + 1) / 2;  // after the first conv, 3x3 / 2 pad 1
  int64_t f = conv_flops(3, kFirst, 3, 1, hw * hw);
  for (int b = 0; b < kSposBlocks; ++b) {
    const auto& unit = static_cast<const ChoiceUnit&>(*choices_[b][path[b]]);
    f += unit.flops(hw);
    hw = (hw + unit.stride() - 1) / unit.stride();
  }
  return f + conv_flops(kStageOut[3], kLast, 1, 1, hw * hw) + kLast * classifier_->weight.shape()[0];
}

SposSubnet::SposSubnet(const SposSupernet& super, std::span<const int> path) {
  MTC_CHECK(check_spos_path(path).ok(), "SposSubnet of path ", path_text(path));
  first_conv_ = register_module("first_conv", super.first_conv());
  features_ = register_module("features", std::make_shared<nn::Sequential>());
  for (int b = 0; b < kSposBlocks; ++b) features_->push_back(super.choice(b, path[b]));
  conv_last_ = register_module("conv_last", super.conv_last());
  classifier_ = register_module("classifier", super.classifier());
}

Tensor SposSubnet::forward(const Tensor& x) {
  return classify(*conv_last_, *classifier_, features_->forward(first_conv_->forward(x)), is_training());
}

absl::Status check_spos_path(std::span<const int> path) {
  if (path.size() != static_cast<size_t>(kSposBlocks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SPOS path '", path_text(path), "' has ", path.size(), " choices: expected ", kSposBlocks,
                     ", one per choice block"));
  }
  for (size_t b = 0; b < path.size(); ++b) {
    if (path[b] < 0 || path[b] >= kSposChoices) {
      return absl::InvalidArgumentError(absl::StrCat("SPOS path '", path_text(path), "': block ", b, " has choice ",
                                                     path[b], ": expected 0-", kSposChoices - 1,
                                                     " (kernel 3, 5, 7, or the Xception-like unit)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> parse_spos_path(const std::string& text) {
  std::vector<int> path;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int c = 0;
    if (!absl::SimpleAtoi(item, &c)) {
      return absl::InvalidArgumentError(absl::StrCat("SPOS path '", text, "': '", item, "' is not a whole number: expected ",
                                                     kSposBlocks, " choices in 0-", kSposChoices - 1,
                                                     ", comma-separated"));
    }
    path.push_back(c);
  }
  MTC_RETURN_IF_ERROR(check_spos_path(path));
  return path;
}

SposSampler::SposSampler(uint64_t seed, const SposSupernet* net, int64_t min_flops, int64_t max_flops)
    : rng_(seed), net_(net), min_flops_(min_flops), max_flops_(max_flops) {}

absl::StatusOr<std::vector<int>> SposSampler::next() {
  const bool ranged = net_ != nullptr && (min_flops_ > 0 || max_flops_ > 0);
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    std::vector<int> path(kSposBlocks);
    for (int& c : path) c = static_cast<int>(rng_.below(kSposChoices));
    if (!ranged) return path;
    const int64_t f = net_->flops(path);
    if (f >= min_flops_ && (max_flops_ <= 0 || f <= max_flops_)) return path;
  }
  return absl::InvalidArgumentError(absl::StrCat("no SPOS path in ", kMaxAttempts, " uniform draws has FLOPs in [",
                                                 min_flops_, ", ", max_flops_, "]: expected a wider range"));
}

}  // namespace mtc::models
