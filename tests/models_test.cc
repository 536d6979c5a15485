// Tests of src/models: make_model's names and errors, parameter counts against the
// published architectures (torchvision's ResNet-50, the CIFAR ResNets with projection
// shortcuts), torchvision's parameter names, output shapes of forward passes, and a
// whole-model backward against finite differences.
#include "mtc/models.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "op_check.h"

namespace mtc::models {
namespace {

TEST(MakeModel, UnknownNameListsTheKnownOnes) {
  auto rt = make_test_runtime();
  auto m = make_model("resnet19");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(m.status().message());
  for (const std::string& n : model_names()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  EXPECT_FALSE(make_model("resnet20", {.num_classes = 0}).ok());
  EXPECT_FALSE(make_model("resnet50", {.image_size = 16}).ok());
}

// The CIFAR ResNets with identity shortcuts (option A) have 0.27M, 0.85M and 1.7M
// parameters (He et al., table 6); counted exactly, 269,722 / 853,018 / 1,727,962.
// Option B adds two 1x1 projections with batch norm: 16*32 + 2*32 + 32*64 + 2*64 = 2,752.
TEST(MakeModel, CifarResNetParameterCounts) {
  auto rt = make_test_runtime();
  const std::pair<const char*, int64_t> want[] = {
      {"resnet20", 269722 + 2752}, {"resnet56", 853018 + 2752}, {"resnet110", 1727962 + 2752}};
  for (const auto& [name, count] : want) {
    auto m = make_model(name);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->net->num_parameters(), count) << name;
    EXPECT_EQ(shape_str(m->sample_shape), "[3,32,32]");
  }
}

// torchvision.models.resnet50() has 25,557,032 parameters with 1000 classes.
TEST(MakeModel, ResNet50MatchesTorchvision) {
  auto rt = make_test_runtime(false, size_t{1} << 30);
  auto m = make_model("resnet50", {.num_classes = 1000});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->net->num_parameters(), 25557032);
  EXPECT_EQ(shape_str(m->sample_shape), "[3,224,224]");
  std::vector<std::string> names;
  for (const auto& [n, t] : m->net->named_parameters()) names.push_back(n);
  ASSERT_EQ(names.size(), 161u);  // torchvision: 161 parameter tensors
  EXPECT_EQ(names.front(), "conv1.weight");
  EXPECT_EQ(names[3], "layer1.0.conv1.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "layer2.0.downsample.0.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "layer4.2.bn3.bias"), names.end());
  EXPECT_EQ(names.back(), "fc.bias");
  EXPECT_EQ(m->net->named_buffers().size(), 2u * 53);  // 53 batch norms
}

// forward_output: the description of model `name`'s output on a synthetic batch of n
// (forward only), or the error; every output value must be finite.
std::string forward_output(const std::string& name, const ModelOptions& o, int n, int64_t* params = nullptr) {
  auto m = make_model(name, o);
  if (!m.ok()) return std::string(m.status().message());
  if (params != nullptr) *params = m->net->num_parameters();
  NoGradGuard no_grad;
  data::SyntheticData src(m->sample_shape, o.num_classes, 1);
  Tensor y = m->net->forward(data::to_device(src.next(n)).images);
  auto v = y.to_vector();
  if (!v.ok()) return std::string(v.status().message());
  for (float x : *v) EXPECT_TRUE(std::isfinite(x)) << name;
  return y.desc().str();
}

TEST(Forward, ResNet20OutputShape) {
  auto rt = make_test_runtime();
  EXPECT_EQ(forward_output("resnet20", {}, 2), "f32[2,10]");
}

TEST(Forward, ResNet50At64x64) {
  auto rt = make_test_runtime(false, size_t{1} << 30);
  EXPECT_EQ(forward_output("resnet50", {.num_classes = 7, .image_size = 64}, 2), "f32[2,7]");
}

TEST(Forward, MlpOutputShapeAndParameters) {
  auto rt = make_test_runtime();
  int64_t params = 0;
  EXPECT_EQ(forward_output("mlp", {.num_classes = 5, .image_size = 8, .mlp_hidden = {32, 16}}, 3, &params),
            "f32[3,5]");
  EXPECT_EQ(params, (192 * 32 + 32) + (32 * 16 + 16) + (16 * 5 + 5));
}

// The whole model's backward against central finite differences of its loss: this
// checks the wiring (shortcuts, projections, pooling, the classifier), not each op (the
// op tests do that). In each probed tensor the element with the largest gradient is
// moved by +-h with a one-hot SGD step (lr 1). ReLU kinks crossed within +-h limit the
// agreement: with this seed one ReLU input in layer3 is within 1e-4 of 0, which moves
// any finite difference through it by up to 4e-3; float rounding adds about 1e-4.
TEST(Backward, CifarResNetMatchesFiniteDifferences) {
  auto rt = make_test_runtime();
  CifarResNet net(/*n=*/1, /*num_classes=*/10);
  data::SyntheticData src({3, 8, 8}, 10, 4);
  const data::Batch b = data::to_device(src.next(4));
  auto loss_of = [&] { return cross_entropy(net.forward(b.images), b.labels); };
  ASSERT_TRUE(loss_of().backward().ok());
  auto opt = optim::Sgd::create(net.parameters(), {.lr = 1.f});
  ASSERT_TRUE(opt.ok());
  const char* probes[] = {"conv1.weight",
                          "layer1.0.conv2.weight",
                          "layer1.0.bn1.weight",
                          "layer2.0.conv1.weight",
                          "layer2.0.downsample.0.weight",
                          "layer3.0.conv2.weight",
                          "layer3.0.downsample.1.weight",
                          "fc.weight",
                          "fc.bias"};
  // Read every analytic gradient first: the probing steps below clear the gradients.
  struct Probe {
    Tensor p;
    int64_t index;
    float analytic;
  };
  std::vector<Probe> ps;
  for (size_t k = 0; k < std::size(probes); ++k) {
    for (const auto& [n, t] : net.named_parameters()) {
      if (n != probes[k]) continue;
      const std::vector<float> g = *t.grad().to_vector();
      const auto at =
          std::max_element(g.begin(), g.end(), [](float a, float b) { return std::abs(a) < std::abs(b); });
      ps.push_back({t, at - g.begin(), *at});
    }
    ASSERT_EQ(ps.size(), k + 1) << probes[k];
  }
  NoGradGuard no_grad;
  constexpr double h = 1e-2, kAtol = 5e-3, kRtol = 0.05;
  double max_diff = 0;
  for (size_t k = 0; k < ps.size(); ++k) {
    Tensor& p = ps[k].p;
    auto move = [&](double delta) {  // p[index] += delta
      (*opt)->zero_grad();
      std::vector<float> g(p.numel(), 0.f);
      g[ps[k].index] = static_cast<float>(-delta);
      p.set_grad(from_vector(p.shape(), g));
      (*opt)->step();
    };
    move(h);
    const double up = *loss_of().item();
    move(-2 * h);
    const double down = *loss_of().item();
    move(h);
    const double fd = (up - down) / (2 * h);
    const double diff = std::abs(ps[k].analytic - fd);
    max_diff = std::max(max_diff, diff);
    EXPECT_LE(diff, kAtol + kRtol * std::abs(fd)) << probes[k] << "[" << ps[k].index << "]: backward "
                                                  << ps[k].analytic << ", finite difference " << fd;
    std::printf("  %s[%lld]: backward %.6f finite difference %.6f\n", probes[k],
                static_cast<long long>(ps[k].index), ps[k].analytic, fd);
  }
  std::printf("  max |backward - finite difference| = %.3g (tol %.0e + %.2f*|fd|)\n", max_diff, kAtol, kRtol);
}

}  // namespace
}  // namespace mtc::models
