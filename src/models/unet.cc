// UNet: an encoder-decoder whose decoder concatenates the encoder's feature maps (the
// skips), and upsample_nearest2x. See include/mtc/models.h.
#include "absl/strings/str_cat.h"
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {
namespace {

// double_conv: (conv3x3-BN-ReLU) twice, in -> mid -> out.
std::shared_ptr<nn::Sequential> double_conv(int64_t in, int64_t mid, int64_t out) {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<ConvBnRelu>(in, mid, 3, 1, 1), std::make_shared<ConvBnRelu>(mid, out, 3, 1, 1)});
}

}  // namespace

Tensor upsample_nearest2x(const Tensor& x) {
  MTC_CHECK(x.shape().size() == 4, "upsample_nearest2x of ", x.desc().str(), ": expected (N, C, H, W)");
  const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  // Along W: (.., W, 1) twice side by side is (.., W, 2), each value twice in a row.
  const Tensor cols = reshape(x, {n, c, h, w, 1});
  const Tensor wide = reshape(concat(std::vector<Tensor>{cols, cols}, 4), {n, c, h, 1, 2 * w});
  // Along H: each row of 2W values twice.
  return reshape(concat(std::vector<Tensor>{wide, wide}, 3), {n, c, 2 * h, 2 * w});
}

UNet::UNet(int64_t width, int num_classes) {
  MTC_CHECK(width >= 1 && num_classes >= 1, "UNet of width ", width, ", ", num_classes, " classes");
  const int64_t w = width;
  // inc and down1..down4: widths w, 2w, 4w, 8w, 8w (each down starts with a 2x2 max pool).
  const int64_t widths[5] = {w, 2 * w, 4 * w, 8 * w, 8 * w};
  for (int i = 0; i < 5; ++i) {
    auto s = std::make_shared<nn::Sequential>();
    if (i > 0) s->push_back(std::make_shared<nn::MaxPool2d>(2, 2));
    const int64_t in = i == 0 ? 3 : widths[i - 1];
    s->push_back(double_conv(in, widths[i], widths[i]));
    down_.push_back(register_module(i == 0 ? std::string("inc") : absl::StrCat("down", i), s));
  }
  // up1..up4: the upsampled map beside the skip of the same size, then a DoubleConv:
  // 16w -> 4w (mid 8w), 8w -> 2w (mid 4w), 4w -> w (mid 2w), 2w -> w (mid w).
  const int64_t ups[4][3] = {{16 * w, 8 * w, 4 * w}, {8 * w, 4 * w, 2 * w}, {4 * w, 2 * w, w}, {2 * w, w, w}};
  for (int i = 0; i < 4; ++i) {
    up_.push_back(register_module(absl::StrCat("up", i + 1), double_conv(ups[i][0], ups[i][1], ups[i][2])));
  }
  outc_ = register_module("outc", std::make_shared<nn::Conv2d>(
                                      nn::Conv2dConfig{.in_channels = w, .out_channels = num_classes, .kernel = 1}));
}

Tensor UNet::forward(const Tensor& x) {
  MTC_CHECK(x.shape().size() == 4 && x.shape()[2] % 16 == 0 && x.shape()[3] % 16 == 0, "UNet input ",
            x.desc().str(), ": expected (N, 3, H, W) with H and W multiples of 16");
  std::vector<Tensor> skips;
  Tensor y = x;
  for (const auto& d : down_) {
    y = d->forward(y);
    skips.push_back(y);
  }
  skips.pop_back();  // the bottom is upsampled, not a skip
  for (const auto& u : up_) {
    y = u->forward(concat(std::vector<Tensor>{skips.back(), upsample_nearest2x(y)}, 1));
    skips.pop_back();
  }
  return global_avg_pool(outc_->forward(y));
}

}  // namespace mtc::models
