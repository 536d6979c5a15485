// Tests of the transformer layers (src/nn/transformer.cc) and the ViT (src/models/vit.cc):
// vit_tiny's parameter count against a formula, its parameter names and output shape;
// multi-head self-attention's forward against a double reference and its gradients
// against central finite differences; and vit_tiny learning a small synthetic pool.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attention_ref.h"
#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/nn.h"
#include "mtc/optim.h"
#include "op_check.h"

namespace mtc {
namespace {

// vit_params: the parameters of a ViT with C input channels, patch p, T tokens, width D,
// L blocks, MLP ratio r and K classes:
//   patch_embed  C p^2 D + D          (conv weight and bias)
//   pos_embed    T D
//   per block    2D + (3D^2 + 3D) + (D^2 + D) + 2D + (r D^2 + r D) + (r D^2 + D)
//                (norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2)
//   norm         2D
//   head         D K + K
int64_t vit_params(int64_t c, int64_t p, int64_t t, int64_t d, int64_t l, int64_t r, int64_t k) {
  const int64_t block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (r * d * d + r * d) + (r * d * d + d);
  return (c * p * p * d + d) + t * d + l * block + 2 * d + (d * k + k);
}

TEST(VitTiny, ParameterCountNamesAndOutputShape) {
  auto rt = make_test_runtime();
  auto m = models::make_model("vit_tiny");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(shape_str(m->sample_shape), "[3,32,32]");
  // D 128, 4 blocks, 64 tokens, patch 4, MLP 4D, 10 classes: 6,272 + 8,192 + 4 * 198,272
  // + 256 + 1,290 = 809,098.
  EXPECT_EQ(vit_params(3, 4, 64, 128, 4, 4, 10), 809098);
  EXPECT_EQ(m->net->num_parameters(), 809098);

  std::vector<std::string> names;
  for (const auto& [n, t] : m->net->named_parameters()) names.push_back(n);
  ASSERT_EQ(names.size(), 1u + 2 + 4 * 12 + 2 + 2);  // pos_embed, patch conv, 12 per block, norm, head
  const auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (const char* n : {"pos_embed", "patch_embed.weight", "patch_embed.bias", "blocks.0.norm1.weight",
                        "blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias", "blocks.0.attn.proj.weight",
                        "blocks.0.norm2.bias", "blocks.0.mlp.fc1.weight", "blocks.3.mlp.fc2.bias", "norm.weight",
                        "head.weight", "head.bias"}) {
    EXPECT_TRUE(has(n)) << n;
  }
  for (const auto& [n, t] : m->net->named_parameters()) {
    if (n == "pos_embed") {
      EXPECT_EQ(shape_str(t.shape()), "[1,64,128]");
    } else if (n == "blocks.2.attn.qkv.weight") {
      EXPECT_EQ(shape_str(t.shape()), "[384,128]");
    } else if (n == "head.weight") {
      EXPECT_EQ(shape_str(t.shape()), "[10,128]");
    }
  }
  EXPECT_TRUE(m->net->named_buffers().empty());

  // pos_embed ~ N(0, 0.02^2): its 8,192 values have a standard deviation near 0.02.
  auto pos = m->net->named_parameters()[0].second.to_vector();
  ASSERT_TRUE(pos.ok()) << pos.status();
  double s2 = 0;
  for (float v : *pos) s2 += double(v) * v;
  const double sd = std::sqrt(s2 / pos->size());
  EXPECT_NEAR(sd, 0.02, 0.001) << "pos_embed standard deviation";

  NoGradGuard no_grad;
  data::SyntheticData src(m->sample_shape, 10, 1);
  Tensor y = m->net->forward(data::to_device(src.next(3)).images);
  auto v = y.to_vector();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(y.desc().str(), "f32[3,10]");
  for (float x : *v) EXPECT_TRUE(std::isfinite(x));
}

TEST(VitTiny, RejectsAnImageSizeThatIsNotAMultipleOfThePatch) {
  auto rt = make_test_runtime();
  auto m = models::make_model("vit_tiny", {.image_size = 30});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("multiple of the patch size 4"), std::string::npos) << m.status();
  auto names = models::model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "vit_tiny"), names.end());
}

// ref_attention: multi-head self-attention in double, written out loop by loop.
RefTensor ref_attention(const std::vector<RefTensor>& in, int heads) {
  const RefTensor &x = in[0], &wqkv = in[1], &bqkv = in[2], &wproj = in[3], &bproj = in[4];
  const int64_t n = x.dim(0), t = x.dim(1), dm = x.dim(2);
  RefTensor qkv({n, t, 3 * dm});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < 3 * dm; ++j) {
        double acc = bqkv.at({j});
        for (int64_t c = 0; c < dm; ++c) acc += x.at({b, i, c}) * wqkv.at({j, c});
        qkv.at({b, i, j}) = acc;
      }
  // q, k, v: columns [0, D), [D, 2D), [2D, 3D) of qkv.
  RefTensor part[3] = {RefTensor({n, t, dm}), RefTensor({n, t, dm}), RefTensor({n, t, dm})};
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < 3 * dm; ++j) part[j / dm].at({b, i, j % dm}) = qkv.at({b, i, j});
  const RefTensor o = ref_attention_heads(part[0], part[1], part[2], heads);
  RefTensor y({n, t, dm});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < dm; ++j) {
        double acc = bproj.at({j});
        for (int64_t c = 0; c < dm; ++c) acc += o.at({b, i, c}) * wproj.at({j, c});
        y.at({b, i, j}) = acc;
      }
  return y;
}

// D 8, 2 heads (d 4), T 4, batch 2: forward within 1e-5 + 1e-4|ref|, every gradient (x and
// the four weights) within 2e-3 + 2e-3|fd| of central differences of the double reference.
TEST(MultiheadSelfAttention, ForwardAndGradientsMatchTheReference) {
  auto rt = make_test_runtime();
  constexpr int kHeads = 2;
  check_op({{2, 4, 8}, {24, 8}, {24}, {8, 8}, {8}},
           [](const TensorList& t) { return nn::multi_head_self_attention(t[0], t[1], t[2], t[3], t[4], kHeads); },
           [](const std::vector<RefTensor>& r) { return ref_attention(r, kHeads); });
}

// The module is the function on its own Linear weights, with timm's names.
TEST(MultiheadSelfAttention, ModuleUsesItsLinears) {
  auto rt = make_test_runtime();
  nn::MultiheadSelfAttention attn(8, 2);
  std::vector<std::string> names;
  for (const auto& [n, t] : attn.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}));
  std::vector<float> xv(2 * 4 * 8);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.7f * static_cast<float>(i));
  Tensor x = from_vector({2, 4, 8}, xv);
  auto a = attn.forward(x).to_vector();
  auto b = nn::multi_head_self_attention(x, attn.qkv->weight, attn.qkv->bias, attn.proj->weight, attn.proj->bias, 2)
               .to_vector();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(MultiheadSelfAttention, BadShapeIsAnError) {
  auto rt = make_test_runtime();
  nn::MultiheadSelfAttention attn(8, 2);
  expect_op_error(attn.forward(zeros({4, 8})), {"multi_head_self_attention", "f32[4,8]", "(N, T, D)"});
}

// vit_tiny, batch 16, AdamW lr 1e-3: batch k is pool batch k % 4, so the network can fit
// the 64 random labels and the loss must fall.
TEST(TrainVitTiny, LossFallsOnSyntheticData) {
  constexpr int kBatch = 16, kPool = 4, kIterations = 30;
  RuntimeOptions o;
  o.memory_bytes = size_t{512} << 20;
  o.num_threads = 2;
  o.seed = 1;
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto m = models::make_model("vit_tiny");
  ASSERT_TRUE(m.ok()) << m.status();
  auto opt = optim::AdamW::create(m->net->parameters(), {.lr = 1e-3f});
  ASSERT_TRUE(opt.ok()) << opt.status();
  data::SyntheticData src(m->sample_shape, 10, 1);
  std::vector<float> l;
  for (int it = 0; it < kIterations; ++it) {
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it % kPool, kBatch)));
    ASSERT_TRUE(loss.ok()) << loss.status();
    auto v = loss->item();
    ASSERT_TRUE(v.ok()) << v.status();
    l.push_back(*v);
  }
  for (size_t i = 0; i < l.size(); ++i) std::printf("  iter %2zu loss %.6f\n", i + 1, l[i]);
  // The first loss is about ln(10) = 2.30 (random labels, near-uniform predictions).
  EXPECT_GT(l[0], 1.8f);
  EXPECT_LT(l[0], 3.5f);
  // The last four iterations (one pass over the pool) average less than half the first loss.
  const float tail = (l[26] + l[27] + l[28] + l[29]) / 4;
  std::printf("  first %.6f, mean of iterations 27-30 %.6f\n", l[0], tail);
  EXPECT_LT(tail, 0.5f * l[0]) << "mean loss of iterations 27-30 " << tail;
}

}  // namespace
}  // namespace mtc
