// The memory-hungry CNN families of src/models (docs/models.md): DenseNet-121 and
// GoogLeNet against torchvision's parameter counts, the U-Net against its formula, the
// CIFAR layouts' output shapes, nearest upsampling's values and gradient, input sizes
// refused, and each CIFAR-sized model's loss falling over a few steps.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/runtime.h"
#include "op_check.h"

namespace mtc {
namespace {

// torchvision.models.densenet121(): 7,978,856 parameters in 364 tensors, 121 batch norms.
TEST(DenseNet121, MatchesTorchvision) {
  auto rt = make_test_runtime(false, size_t{1} << 30);
  auto m = models::make_model("densenet121", {.num_classes = 1000});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(shape_str(m->sample_shape), "[3,224,224]");
  EXPECT_EQ(m->net->num_parameters(), 7978856);
  const auto named = m->net->named_parameters();
  EXPECT_EQ(named.size(), 364u);
  EXPECT_EQ(named.front().first, "conv0.weight");
  EXPECT_EQ(named[3].first, "denseblock1.denselayer1.norm1.weight");
  EXPECT_EQ(named.back().first, "classifier.bias");
  EXPECT_EQ(m->net->named_buffers().size(), 2u * 121);
  // The CIFAR stem: a 3x3 conv for the 7x7 one (27 * 64 weights for 147 * 64), 10 classes.
  auto c = models::make_model("densenet121_cifar");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(shape_str(c->sample_shape), "[3,32,32]");
  EXPECT_EQ(c->net->num_parameters(), 7978856 - (147 - 27) * 64 - 1024 * 990 - 990);
}

// torchvision.models.googlenet(aux_logits=False, init_weights=False): 6,624,904
// parameters; 57 BasicConv2d units of 3 tensors each, and the classifier's 2.
TEST(GoogLeNet, MatchesTorchvision) {
  auto rt = make_test_runtime(false, size_t{1} << 30);
  auto m = models::make_model("googlenet", {.num_classes = 1000});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(shape_str(m->sample_shape), "[3,224,224]");
  EXPECT_EQ(m->net->num_parameters(), 6624904);
  EXPECT_EQ(m->net->named_parameters().size(), 57u * 3 + 2);
  // The CIFAR stem: one conv3x3 3 -> 192 for conv7x7 3 -> 64, conv1x1 64 -> 64 and conv3x3
  // 64 -> 192 (each with its BN's two parameters per channel).
  auto c = models::make_model("googlenet_cifar");
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t imagenet_stem = (147 * 64 + 128) + (64 * 64 + 128) + (576 * 192 + 384);
  const int64_t cifar_stem = 27 * 192 + 384;
  EXPECT_EQ(c->net->num_parameters(), 6624904 - imagenet_stem + cifar_stem - 1024 * 990 - 990);
}

// The U-Net of width w = 32: DoubleConv(in, mid, out) has 9 in mid + 2 mid + 9 mid out +
// 2 out parameters; inc (3, w, w), down1-4 (w, 2w, 2w) (2w, 4w, 4w) (4w, 8w, 8w)
// (8w, 8w, 8w), up1-4 (16w, 8w, 4w) (8w, 4w, 2w) (4w, 2w, w) (2w, w, w), outc w x 10 + 10.
TEST(UNet, ParameterCountAndOutputShape) {
  auto rt = make_test_runtime();
  auto m = models::make_model("unet");
  ASSERT_TRUE(m.ok()) << m.status();
  const int64_t w = 32;
  auto dc = [](int64_t in, int64_t mid, int64_t out) { return 9 * in * mid + 2 * mid + 9 * mid * out + 2 * out; };
  const int64_t want = dc(3, w, w) + dc(w, 2 * w, 2 * w) + dc(2 * w, 4 * w, 4 * w) + dc(4 * w, 8 * w, 8 * w) +
                       dc(8 * w, 8 * w, 8 * w) + dc(16 * w, 8 * w, 4 * w) + dc(8 * w, 4 * w, 2 * w) +
                       dc(4 * w, 2 * w, w) + dc(2 * w, w, w) + (w * 10 + 10);
  EXPECT_EQ(m->net->num_parameters(), want);
  std::printf("  unet: %lld parameters\n", static_cast<long long>(want));
  NoGradGuard no_grad;
  data::SyntheticData src(m->sample_shape, 10, 1);
  Tensor y = m->net->forward(data::to_device(src.next(2)).images);
  EXPECT_EQ(y.desc().str(), "f32[2,10]");
  const std::vector<float> values = *y.to_vector();  // a range-for over *temporary would dangle
  for (float v : values) EXPECT_TRUE(std::isfinite(v));
}

TEST(CnnFamilies, CifarLayoutsGiveOneScorePerClass) {
  auto rt = make_test_runtime();
  for (const char* name : {"densenet121_cifar", "googlenet_cifar"}) {
    auto m = models::make_model(name);
    ASSERT_TRUE(m.ok()) << m.status();
    m->net->eval();
    NoGradGuard no_grad;
    data::SyntheticData src(m->sample_shape, 10, 1);
    Tensor y = m->net->forward(data::to_device(src.next(2)).images);
    EXPECT_EQ(y.desc().str(), "f32[2,10]") << name;
    const std::vector<float> values = *y.to_vector();
    for (float v : values) EXPECT_TRUE(std::isfinite(v)) << name;
  }
}

TEST(CnnFamilies, ImageSizesTheyCannotTakeAreRefused) {
  auto expect_bad = [](const char* name, int size, const std::string& want) {
    auto s = models::input_shape(name, {.image_size = size});
    ASSERT_FALSE(s.ok()) << name << " at " << size;
    EXPECT_NE(std::string(s.status().message()).find(want), std::string::npos) << s.status();
  };
  expect_bad("densenet121", 16, "densenet121 image size 16: expected >= 32");
  expect_bad("googlenet", 24, "googlenet image size 24: expected >= 32");
  expect_bad("densenet121_cifar", 4, "densenet121_cifar image size 4: expected >= 8");
  expect_bad("unet", 40, "unet image size 40: expected a multiple of 16");
  EXPECT_TRUE(models::input_shape("unet", {.image_size = 48}).ok());
}

// Each value of x in a 2x2 square; the gradient of each input is the sum of its four copies'.
TEST(UpsampleNearest2x, ValuesAndGradient) {
  auto rt = make_test_runtime();
  Tensor x = from_vector({1, 1, 2, 2}, std::vector<float>{1, 2, 3, 4});
  x.set_requires_grad(true);
  Tensor y = models::upsample_nearest2x(x);
  ASSERT_EQ(y.desc().str(), "f32[1,1,4,4]");
  EXPECT_EQ(*y.to_vector(), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  std::vector<float> wv(16);
  for (int i = 0; i < 16; ++i) wv[i] = static_cast<float>(i);
  ASSERT_TRUE(sum(mul(y, from_vector({1, 1, 4, 4}, wv))).backward().ok());
  // x[0] is at (0,0) (0,1) (1,0) (1,1): 0 + 1 + 4 + 5; x[1]: 2 + 3 + 6 + 7; x[2]: 8 + 9 +
  // 12 + 13; x[3]: 10 + 11 + 14 + 15.
  EXPECT_EQ(*x.grad().to_vector(), (std::vector<float>{10, 18, 42, 50}));
}

// losses: `iterations` AdamW steps (lr 1e-3) of model `name` on a pool of 2 synthetic
// batches of `batch` 32x32 images.
std::vector<float> losses(const std::string& name, int batch, int iterations) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 30;
  o.num_threads = 2;
  o.seed = 1;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return {};
  auto m = models::make_model(name);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  auto opt = optim::AdamW::create(m->net->parameters(), {.lr = 1e-3f});
  EXPECT_TRUE(opt.ok()) << opt.status();
  data::SyntheticData src(m->sample_shape, 10, 2);
  std::vector<float> l;
  for (int it = 0; it < iterations; ++it) {
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it % 2, batch)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return l;
    auto v = loss->item();
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) return l;
    l.push_back(*v);
  }
  for (size_t i = 0; i < l.size(); ++i) std::printf("  %s iter %2zu loss %.6f\n", name.c_str(), i + 1, l[i]);
  return l;
}

// The first loss near ln 10 = 2.30, the mean of the last two below 70% of it.
void expect_loss_falls(const std::string& name) {
  const std::vector<float> l = losses(name, 8, 12);
  ASSERT_EQ(l.size(), 12u) << name;
  EXPECT_GT(l[0], 1.5f) << name;
  EXPECT_LT(l[0], 4.f) << name;
  const float tail = (l[10] + l[11]) / 2;
  EXPECT_LT(tail, 0.7f * l[0]) << name << ": mean loss of iterations 11-12 " << tail;
}

TEST(TrainCnnFamilies, DenseNet121CifarLossFalls) { expect_loss_falls("densenet121_cifar"); }
TEST(TrainCnnFamilies, GoogLeNetCifarLossFalls) { expect_loss_falls("googlenet_cifar"); }
TEST(TrainCnnFamilies, UNetLossFalls) { expect_loss_falls("unet"); }

}  // namespace
}  // namespace mtc
