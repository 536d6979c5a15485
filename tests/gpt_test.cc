// Tests of the GPT language model (src/models/gpt.cc), its attention helpers in
// src/nn/transformer.cc (causal_mask, scaled_dot_product_attention), its token data
// (src/data/tokens.cc, HostBatch::rows), VGG-16 (src/models/vgg.cc), and mtc-train's
// --model gpt / --model vgg16 with their flags: parameter counts against formulas and the
// published figures, names and shapes, GPT-2's initialisation, causality, attention
// against a double reference with finite-difference gradients, the loss falling, and
// the CLI end to end.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "attention_ref.h"
#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/nn.h"
#include "mtc/optim.h"
#include "op_check.h"
#include "tool_run.h"

namespace mtc {
namespace {

// ---- parameter counts ----

// gpt_params: wte V D, wpe T D, per block (ln1 2D, q k v proj 4(D^2 + D), ln2 2D, fc1
// 4D^2 + 4D, fc2 4D^2 + D), ln_f 2D, and V D more for an untied head, written out apart
// from GptConfig::num_parameters.
int64_t gpt_params(int64_t l, int64_t d, int64_t t, int64_t v, bool tied) {
  const int64_t block = 2 * d + 4 * (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d);
  return v * d + t * d + l * block + 2 * d + (tied ? 0 : v * d);
}

TEST(GptConfig, NamedConfigurationsAndGpt2SmallCount) {
  auto small = models::gpt_config("small");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->layers, 12);
  EXPECT_EQ(small->hidden, 768);
  EXPECT_EQ(small->heads, 12);
  EXPECT_EQ(small->seq, 1024);
  EXPECT_EQ(small->vocab, 50257);
  EXPECT_TRUE(small->tied_head);
  // GPT-2 small (Hugging Face's GPT2Model, tied head, n_positions 1024): 124,439,808.
  EXPECT_EQ(gpt_params(12, 768, 1024, 50257, true), 124439808);
  EXPECT_EQ(small->num_parameters(), 124439808);
  auto tiny = models::gpt_config("tiny");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->describe(), "2 layers, hidden 64, 4 heads, seq 16, vocab 128, tied head");
  EXPECT_EQ(tiny->num_parameters(), gpt_params(2, 64, 16, 128, true));
  auto bad = models::gpt_config("medium");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected tiny or small"), std::string::npos) << bad.status();
}

TEST(GptConfig, CheckNamesTheFieldAndWhatWasExpected) {
  const std::pair<models::GptConfig, const char*> cases[] = {
      {{.heads = 5}, "heads 5 do not divide hidden 64"},
      {{.seq = 0}, "seq 0: expected >= 1"},
      {{.layers = 0}, "layers 0: expected >= 1"},
      {{.vocab = 0}, "vocab 0: expected >= 1"},
  };
  for (const auto& [c, want] : cases) {
    const absl::Status s = c.check();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << want;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
    // make_model and input_shape refuse it the same way, before building anything.
    EXPECT_FALSE(models::input_shape("gpt", {.gpt = c}).ok()) << want;
  }
  EXPECT_TRUE(models::GptConfig{}.check().ok());
}

// GPT-2 small built in full: 124,439,808 parameters (475 MiB) in a 640 MiB arena.
TEST(Gpt, Gpt2SmallBuildsWithThePublishedCount) {
  auto rt = make_test_runtime(false, size_t{640} << 20);
  auto m = models::make_model("gpt", {.gpt = *models::gpt_config("small")});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->net->num_parameters(), 124439808);
  EXPECT_EQ(shape_str(m->sample_shape), "[1024]");
  ASSERT_TRUE(rt->interpreter().sync().ok());
}

TEST(Gpt, TinyParameterNamesShapesAndInitialisation) {
  auto rt = make_test_runtime();
  auto m = models::make_model("gpt");  // ModelOptions' gpt is the tiny configuration
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(shape_str(m->sample_shape), "[16]");
  EXPECT_TRUE(models::is_language_model("gpt"));
  EXPECT_FALSE(models::is_language_model("vgg16"));
  EXPECT_EQ(m->net->num_parameters(), gpt_params(2, 64, 16, 128, true));
  EXPECT_EQ(m->net->num_parameters(), 109312);
  EXPECT_TRUE(m->net->named_buffers().empty());

  std::vector<std::string> names;
  for (const auto& [n, t] : m->net->named_parameters()) names.push_back(n);
  ASSERT_EQ(names.size(), 2u + 2 * 16 + 2);  // wte, wpe; 16 per block; ln_f
  EXPECT_EQ(names[0], "wte");
  EXPECT_EQ(names[1], "wpe");
  EXPECT_EQ(names[2], "blocks.0.ln1.weight");
  const std::vector<std::string> block = {
      "ln1.weight",      "ln1.bias",       "attn.q.weight",  "attn.q.bias",    "attn.k.weight",  "attn.k.bias",
      "attn.v.weight",   "attn.v.bias",    "attn.proj.weight", "attn.proj.bias", "ln2.weight",    "ln2.bias",
      "mlp.fc1.weight",  "mlp.fc1.bias",   "mlp.fc2.weight", "mlp.fc2.bias"};
  for (size_t i = 0; i < block.size(); ++i) EXPECT_EQ(names[2 + 16 + i], "blocks.1." + block[i]);
  EXPECT_EQ(names.back(), "ln_f.bias");

  // GPT-2's initialisation: weights N(0, 0.02^2), biases 0, LayerNorm 1 and 0.
  for (const auto& [n, t] : m->net->named_parameters()) {
    auto v = t.to_vector();
    ASSERT_TRUE(v.ok()) << v.status();
    double s1 = 0, s2 = 0;
    for (float x : *v) s1 += x, s2 += double(x) * x;
    const double mean = s1 / v->size(), sd = std::sqrt(s2 / v->size() - mean * mean);
    if (n == "wte" || n == "wpe" || n.ends_with("attn.q.weight") || n.ends_with("fc2.weight")) {
      EXPECT_NEAR(sd, 0.02, n == "wpe" ? 0.002 : 0.001) << n;
      EXPECT_NEAR(mean, 0, 0.002) << n;
    } else if (n.ends_with("ln1.weight") || n.ends_with("ln_f.weight")) {
      EXPECT_EQ(*std::min_element(v->begin(), v->end()), 1.f) << n;
      EXPECT_EQ(*std::max_element(v->begin(), v->end()), 1.f) << n;
    } else if (n.ends_with(".bias")) {
      EXPECT_EQ(s2, 0) << n << " is not zero";
    }
    const std::pair<const char*, const char*> shapes[] = {
        {"blocks.0.attn.k.weight", "[64,64]"}, {"blocks.0.mlp.fc1.weight", "[256,64]"}, {"wte", "[128,64]"},
        {"wpe", "[16,64]"}};
    for (const auto& [name, shape] : shapes) {
      if (n == name) {
        EXPECT_EQ(shape_str(t.shape()), shape) << n;
      }
    }
  }

  NoGradGuard no_grad;
  data::SyntheticTokens src(16, 128, 1);
  Tensor y = m->net->forward(data::to_device(src.next(3)).images);
  auto v = y.to_vector();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(y.desc().str(), "f32[3,16,128]");
  for (float x : *v) ASSERT_TRUE(std::isfinite(x));
}

TEST(Gpt, UntiedHeadHasItsOwnWeight) {
  auto rt = make_test_runtime();
  models::GptConfig c;
  c.tied_head = false;
  auto m = models::make_model("gpt", {.gpt = c});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->net->num_parameters(), gpt_params(2, 64, 16, 128, false));
  EXPECT_EQ(m->net->num_parameters(), c.num_parameters());
  const auto named = m->net->named_parameters();
  EXPECT_EQ(named.back().first, "lm_head.weight");
  EXPECT_EQ(shape_str(named.back().second.shape()), "[128,64]");
}

// logits_of: the tiny GPT's logits for one batch of token ids (N, T).
std::vector<float> logits_of(nn::Module& net, int64_t n, int64_t t, const std::vector<int32_t>& ids) {
  NoGradGuard no_grad;
  auto v = net.forward(from_vector_i32({n, t}, ids)).to_vector();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>{};
}

// Changing the token at position p changes no logit at positions < p (bit for bit) and
// changes those at p; a prefix of T' < T tokens gives the first T' positions' logits.
TEST(Gpt, AttentionIsCausal) {
  auto rt = make_test_runtime();
  models::Gpt net(models::GptConfig{});  // tiny: T 16, V 128
  constexpr int64_t kN = 2, kT = 16, kV = 128;
  data::SyntheticTokens src(kT, kV, 3);
  const std::vector<int32_t> ids = src.batch_at(0, kN).tokens;
  const std::vector<float> base = logits_of(net, kN, kT, ids);
  ASSERT_EQ(base.size(), static_cast<size_t>(kN * kT * kV));
  for (int64_t p : {int64_t{15}, int64_t{9}, int64_t{0}}) {
    std::vector<int32_t> changed = ids;
    for (int64_t b = 0; b < kN; ++b) changed[b * kT + p] = (changed[b * kT + p] + 37) % kV;
    const std::vector<float> got = logits_of(net, kN, kT, changed);
    ASSERT_EQ(got.size(), base.size());
    for (int64_t b = 0; b < kN; ++b) {
      for (int64_t i = 0; i < kT; ++i) {
        const size_t at = static_cast<size_t>((b * kT + i) * kV);
        const bool same = std::equal(base.begin() + at, base.begin() + at + kV, got.begin() + at);
        if (i < p) {
          EXPECT_TRUE(same) << "changing position " << p << " changed the logits of earlier position " << i;
        } else if (i == p) {
          EXPECT_FALSE(same) << "changing position " << p << " left its own logits unchanged";
        }
      }
    }
  }
  // A shorter sequence: the first 7 tokens of each row.
  std::vector<int32_t> prefix;
  for (int64_t b = 0; b < kN; ++b) prefix.insert(prefix.end(), ids.begin() + b * kT, ids.begin() + b * kT + 7);
  const std::vector<float> short_logits = logits_of(net, kN, 7, prefix);
  ASSERT_EQ(short_logits.size(), static_cast<size_t>(kN * 7 * kV));
  for (int64_t b = 0; b < kN; ++b) {
    for (int64_t i = 0; i < 7 * kV; ++i) {
      ASSERT_NEAR(short_logits[b * 7 * kV + i], base[b * kT * kV + i], 1e-5) << "row " << b << " element " << i;
    }
  }
}

TEST(Gpt, BadInputIsAnError) {
  auto rt = make_test_runtime();
  models::Gpt net(models::GptConfig{});
  expect_op_error(net.forward(from_vector_i32({1, 17}, std::vector<int32_t>(17, 1))),
                  {"gpt: input i32[1,17]", "1 <= T <= seq 16"});
  expect_op_error(net.forward(zeros({2, 16})), {"gpt: input f32[2,16]", "i32 token ids"});
}

// ---- attention helpers ----

TEST(CausalMask, ZeroOnAndBelowTheDiagonal) {
  auto rt = make_test_runtime();
  auto m = nn::causal_mask(3).to_vector();
  ASSERT_TRUE(m.ok()) << m.status();
  const float x = nn::kMaskedScore;
  EXPECT_EQ(*m, (std::vector<float>{0, x, x, 0, 0, x, 0, 0, 0}));
}

// D 8, 2 heads, T 5, batch 2: with a causal mask made for 6 positions (its top-left 5x5
// block is used) and without a mask, the forward and the gradients of q, k and v.
TEST(ScaledDotProductAttention, MatchesTheReferenceWithAndWithoutACausalMask) {
  auto rt = make_test_runtime();
  for (bool causal : {true, false}) {
    check_op(
        {{2, 5, 8}, {2, 5, 8}, {2, 5, 8}},
        [&](const TensorList& t) {
          return nn::scaled_dot_product_attention(t[0], t[1], t[2], 2, causal ? nn::causal_mask(6) : Tensor());
        },
        [&](const std::vector<RefTensor>& r) {
          return ref_attention_heads(r[0], r[1], r[2], 2, causal, nn::kMaskedScore);
        });
  }
}

TEST(ScaledDotProductAttention, BadShapesAreAnError) {
  auto rt = make_test_runtime();
  const Tensor x = zeros({2, 5, 8});
  expect_op_error(nn::scaled_dot_product_attention(x, x, x, 3), {"scaled_dot_product_attention", "3 heads"});
  expect_op_error(nn::scaled_dot_product_attention(x, x, x, 2, nn::causal_mask(4)),
                  {"mask f32[4,4]", "S >= T"});
  expect_op_error(nn::scaled_dot_product_attention(x, zeros({2, 4, 8}), x, 2), {"k f32[2,4,8]"});
}

// ---- token data ----

TEST(SyntheticTokens, NextTokenLabelsReproducibleAndInRange) {
  data::SyntheticTokens a(8, 50, 5), b(8, 50, 5), other(8, 50, 6);
  const data::HostBatch x = a.batch_at(3, 4);
  EXPECT_EQ(shape_str(x.shape), "[4,8]");
  EXPECT_EQ(x.labels_per_sample, 8);
  ASSERT_EQ(x.tokens.size(), 32u);
  ASSERT_EQ(x.labels.size(), 32u);
  EXPECT_TRUE(x.images.empty());
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j + 1 < 8; ++j) EXPECT_EQ(x.labels[i * 8 + j], x.tokens[i * 8 + j + 1]);
  }
  for (int32_t t : x.tokens) EXPECT_TRUE(t >= 0 && t < 50);
  for (int32_t t : x.labels) EXPECT_TRUE(t >= 0 && t < 50);
  EXPECT_EQ(b.batch_at(3, 4).tokens, x.tokens);
  EXPECT_EQ(b.batch_at(3, 4).labels, x.labels);
  EXPECT_NE(other.batch_at(3, 4).tokens, x.tokens);
  EXPECT_NE(a.batch_at(2, 4).tokens, x.tokens);
  EXPECT_EQ(a.sample_shape(), Shape{8});
  EXPECT_EQ(a.num_classes(), 50);

  // rows: a rank's share keeps whole sequences and their labels.
  const data::HostBatch r = x.rows(1, 2);
  EXPECT_EQ(shape_str(r.shape), "[2,8]");
  EXPECT_EQ(r.tokens, std::vector<int32_t>(x.tokens.begin() + 8, x.tokens.begin() + 24));
  EXPECT_EQ(r.labels, std::vector<int32_t>(x.labels.begin() + 8, x.labels.begin() + 24));

  auto rt = make_test_runtime();
  const data::Batch d = data::to_device(x);
  EXPECT_EQ(d.images.desc().str(), "i32[4,8]");
  EXPECT_EQ(d.labels.desc().str(), "i32[4,8]");
  EXPECT_EQ(*d.images.to_vector_i32(), x.tokens);
  EXPECT_FALSE(data::open_token_data("cifar10:/x", 8, 50, 0).ok());
  EXPECT_TRUE(data::open_token_data("synthetic", 8, 50, 0).ok());
}

TEST(HostBatchRows, ImageBatchesSplitAsBefore) {
  data::SyntheticData src({2, 3}, 5, 1);
  const data::HostBatch x = src.batch_at(0, 4);
  const data::HostBatch r = x.rows(2, 2);
  EXPECT_EQ(shape_str(r.shape), "[2,2,3]");
  EXPECT_EQ(r.images, std::vector<float>(x.images.begin() + 12, x.images.end()));
  EXPECT_EQ(r.labels, std::vector<int32_t>(x.labels.begin() + 2, x.labels.end()));
  EXPECT_TRUE(r.tokens.empty());
}

// ---- training ----

// losses: `iterations` train_steps of model `name` with AdamW on pool batch k % pool of
// `src` (a small pool the model can fit, so the loss must fall).
template <typename Source>
std::vector<float> losses(const std::string& name, const models::ModelOptions& mo, const Source& src, int batch,
                          int iterations, int pool, float lr) {
  RuntimeOptions o;
  o.memory_bytes = size_t{512} << 20;
  o.num_threads = 2;
  o.seed = 1;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return {};
  auto m = models::make_model(name, mo);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  auto opt = optim::AdamW::create(m->net->parameters(), {.lr = lr});
  EXPECT_TRUE(opt.ok()) << opt.status();
  std::vector<float> l;
  for (int it = 0; it < iterations; ++it) {
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it % pool, batch)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return l;
    auto v = loss->item();
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) return l;
    l.push_back(*v);
  }
  for (size_t i = 0; i < l.size(); ++i) std::printf("  iter %2zu loss %.6f\n", i + 1, l[i]);
  return l;
}

// The tiny GPT, 8 sequences of 16 random tokens from 128, a pool of 2 batches, AdamW lr
// 3e-3: the first loss is about ln 128 = 4.85 and the last two fall below 70% of it.
TEST(TrainGpt, TinyLossFalls) {
  const std::vector<float> l = losses("gpt", {}, data::SyntheticTokens(16, 128, 2), 8, 20, 2, 3e-3f);
  ASSERT_EQ(l.size(), 20u);
  EXPECT_NEAR(l[0], std::log(128.f), 0.3f);
  const float tail = (l[18] + l[19]) / 2;
  EXPECT_LT(tail, 0.7f * l[0]) << "mean loss of iterations 19-20 " << tail;
}

// VGG-16, batch 8 of 32x32 images, a pool of 2 batches, AdamW lr 1e-3: the first loss is
// near ln 10 = 2.30 and the last two fall below 70% of it.
TEST(TrainVgg16, LossFallsAtASmallBatch) {
  const std::vector<float> l = losses("vgg16", {}, data::SyntheticData({3, 32, 32}, 10, 2), 8, 16, 2, 1e-3f);
  ASSERT_EQ(l.size(), 16u);
  EXPECT_GT(l[0], 1.5f);
  EXPECT_LT(l[0], 4.f);
  const float tail = (l[14] + l[15]) / 2;
  EXPECT_LT(tail, 0.7f * l[0]) << "mean loss of iterations 15-16 " << tail;
}

// ---- VGG-16 ----

// VGG-16 with batch norm in the CIFAR layout (13 conv3x3 with bias, BN, Linear(512, 10)):
// conv weights 14,710,464 + conv biases 4,224 + BN 8,448 + classifier 5,130 = 14,728,266.
TEST(Vgg16, ParameterCountNamesAndOutputShape) {
  auto rt = make_test_runtime();
  auto m = models::make_model("vgg16");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(shape_str(m->sample_shape), "[3,32,32]");
  int64_t conv_w = 0, widths = 0, in = 3;
  for (int w : models::kVgg16) {
    if (w == 0) continue;
    conv_w += in * w * 9;
    widths += w;
    in = w;
  }
  EXPECT_EQ(conv_w, 14710464);
  EXPECT_EQ(widths, 4224);
  EXPECT_EQ(m->net->num_parameters(), conv_w + widths + 2 * widths + (512 * 10 + 10));
  EXPECT_EQ(m->net->num_parameters(), 14728266);
  const auto named = m->net->named_parameters();
  ASSERT_EQ(named.size(), 13u * 4 + 2);
  EXPECT_EQ(named[0].first, "features.0.weight");
  EXPECT_EQ(named[2].first, "features.1.weight");  // the first batch norm
  EXPECT_EQ(named.back().first, "classifier.bias");
  EXPECT_EQ(m->net->named_buffers().size(), 13u * 2);
  EXPECT_FALSE(models::make_model("vgg16", {.image_size = 48}).ok());

  NoGradGuard no_grad;
  data::SyntheticData src(m->sample_shape, 10, 1);
  Tensor y = m->net->forward(data::to_device(src.next(2)).images);
  ASSERT_TRUE(y.to_vector().ok());
  EXPECT_EQ(y.desc().str(), "f32[2,10]");
}

// ---- mtc-train ----

std::string train_tool() {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  return (self.parent_path() / ".." / "launch" / "mtc-train").lexically_normal().string();
}

class MtcTrainModels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(train_tool())) GTEST_SKIP() << "mtc-train not built at " << train_tool();
  }
  // train: stdout of a run that must succeed.
  static std::string train(const std::string& args) {
    const ToolRun r = run_tool(train_tool() + " " + args + " --threads=2 2>&1");
    EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
    return r.output;
  }
  // expect_bad: status 2 and one stderr line "mtc-train: error: ..." holding `what`.
  static void expect_bad(const std::string& args, const std::string& what) {
    const ToolRun r = run_tool(train_tool() + " " + args + " --threads=1 2>&1 1>/dev/null");
    EXPECT_EQ(r.status, 2) << args << "\nstderr: " << r.output;
    EXPECT_EQ(r.output.rfind("mtc-train: error: ", 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "expected one line: " << r.output;
    EXPECT_NE(r.output.find(what), std::string::npos) << "expected '" << what << "' in: " << r.output;
  }
};

TEST_F(MtcTrainModels, TrainsTheTinyGpt) {
  const std::string out = train("--model=gpt --batch=4 --iterations=3 --warmup=1 --memory=256MiB --optimizer=adamw "
                                "--lr=1e-3");
  EXPECT_NE(out.find("model: gpt (2 layers, hidden 64, 4 heads, seq 16, vocab 128, tied head), 109312 parameters"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("input [16], 128 classes"), std::string::npos) << out;
  EXPECT_NE(out.find("data: synthetic tokens: sequences of 16 ids uniform in [0, 128)"), std::string::npos) << out;
  EXPECT_NE(out.find("summary model=gpt batch=4 iterations=3 "), std::string::npos) << out;
}

TEST_F(MtcTrainModels, GptFlagsOverrideTheConfiguration) {
  const std::string out = train("--model=gpt --layers=1 --hidden=32 --heads=2 --seq=8 --vocab=40 --tied_head=false "
                                "--batch=2 --iterations=1 --warmup=0 --memory=128MiB");
  models::GptConfig c{.layers = 1, .hidden = 32, .heads = 2, .seq = 8, .vocab = 40, .tied_head = false};
  EXPECT_NE(out.find("model: gpt (1 layers, hidden 32, 2 heads, seq 8, vocab 40, untied head), " +
                     std::to_string(c.num_parameters()) + " parameters"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("summary model=gpt batch=2 iterations=1 "), std::string::npos) << out;
}

TEST_F(MtcTrainModels, TrainsVgg16) {
  const std::string out = train("--model=vgg16 --batch=4 --iterations=2 --warmup=0 --memory=512MiB");
  EXPECT_NE(out.find("model: vgg16, 14728266 parameters"), std::string::npos) << out;
  EXPECT_NE(out.find("summary model=vgg16 batch=4 iterations=2 "), std::string::npos) << out;
}

TEST_F(MtcTrainModels, BadGptFlags) {
  expect_bad("--model=gpt --heads=5", "--heads 5 does not divide --hidden 64");
  expect_bad("--model=gpt --hidden=48 --heads=5", "--heads 5 does not divide --hidden 48");
  expect_bad("--model=gpt --seq=0", "--seq '0': expected a whole number in [1, ");
  expect_bad("--model=gpt --vocab=-1", "--vocab '-1'");
  expect_bad("--model=gpt --layers=two", "--layers 'two'");
  expect_bad("--model=gpt --gpt_config=huge", "--gpt_config: unknown gpt configuration 'huge': expected tiny or small");
  expect_bad("--model=resnet20 --layers=3", "--layers with --model resnet20");
  expect_bad("--model=vgg16 --tied_head=false", "--tied_head with --model vgg16");
  expect_bad("--model=gpt --num_classes=5", "--num_classes with --model gpt");
  expect_bad("--model=gpt --image_size=64", "--image_size with --model gpt");
  expect_bad("--model=gpt --data=cifar10:/nonexistent", "--data: data 'cifar10:/nonexistent' for a language model");
  expect_bad("--model=vgg16 --image_size=40", "vgg16 image size 40: expected a multiple of 32");
  expect_bad("--model=lstm --heads=2", "--heads with --model lstm: it configures the GPT's attention");
  expect_bad("--model=treelstm --tied_head=false",
             "--tied_head with --model treelstm: it configures the GPT's head; expected --hidden, --seq and --vocab only");
  expect_bad("--model=treelstm --layers=3", "--layers with --model treelstm: the Tree-LSTM has one cell");
  expect_bad("--model=lstm --image_size=32", "--image_size with --model lstm");
}

// The recurrent language models read --layers, --hidden, --seq and --vocab; no attention,
// so any width goes (30 is no multiple of the tiny GPT's 4 heads).
TEST_F(MtcTrainModels, TrainsTheRecurrentModelsAtAnyWidth) {
  for (const char* model : {"lstm", "treelstm"}) {
    const std::string out =
        train(absl::StrCat("--model=", model, " --hidden=30 --seq=8 --vocab=40 --batch=4 --iterations=2 --warmup=0"));
    EXPECT_NE(out.find(absl::StrCat("summary model=", model, " batch=4 iterations=2 ")), std::string::npos) << out;
    // The model line names what the model uses: no heads, no head tying; no layers for
    // the Tree-LSTM.
    const std::string described = std::string(model) == "lstm" ? "model: lstm (2 layers, hidden 30, seq 8, vocab 40)"
                                                               : "model: treelstm (hidden 30, seq 8, vocab 40)";
    EXPECT_NE(out.find(described), std::string::npos) << out;
  }
}

// SPOS: a path drawn per iteration (shown on every progress line), or one fixed path.
TEST_F(MtcTrainModels, TrainsTheSposSupernetAPathPerIteration) {
  auto paths_of = [](const std::string& out) {  // what ends each progress line: " | path 0,3,1,..."
    std::set<std::string> paths;
    for (size_t at = out.find(" | path "); at != std::string::npos; at = out.find(" | path ", at + 1)) {
      paths.insert(out.substr(at + 8, out.find('\n', at) - at - 8));
    }
    return paths;
  };
  std::string out = train("--model=spos --batch=4 --iterations=4 --warmup=0 --log_every=1");
  EXPECT_NE(out.find("model: spos (a path per iteration, uniform), 7374416 parameters"), std::string::npos) << out;
  EXPECT_EQ(paths_of(out).size(), 4u) << out;  // 4^20 paths: four draws differ
  const std::string fixed = "3,0,1,2,2,1,0,3,3,2,1,0,0,1,2,3,1,1,2,0";
  out = train("--model=spos --batch=4 --iterations=2 --warmup=0 --log_every=1 --spos_path=" + fixed);
  EXPECT_NE(out.find("model: spos (path fixed: " + fixed + ")"), std::string::npos) << out;
  EXPECT_NE(out.find("iter 2 loss"), std::string::npos) << out;
  EXPECT_NE(out.find(" | path " + fixed + "\n"), std::string::npos) << out;
  // A pool of 2: eight iterations run only those two paths.
  out = train("--model=spos --batch=4 --iterations=8 --warmup=0 --log_every=1 --spos_pool=2");
  EXPECT_NE(out.find("model: spos (a path per iteration, uniform among 2 drawn)"), std::string::npos) << out;
  EXPECT_EQ(paths_of(out).size(), 2u) << out;
  // Batch 1 at 32x32: the last stage's batch norm sees one value per channel. That is the
  // error (status 1, in the iteration), where a unit used to read the failed tensor's
  // shape and crash.
  const ToolRun r = run_tool(train_tool() + " --model=spos --batch=1 --iterations=1 --warmup=0 --threads=1 2>&1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("training needs more than 1 value per channel"), std::string::npos) << r.output;
}

// moe_gpt: the tiny GPT with 4 experts in block 1 (of 0-1); every progress line ends with
// the last iteration's tokens per expert and its dropped choices. Parameters: the dense
// 109312, less block 1's MLP (33088), plus a router (64 x 4) and 4 such MLPs.
TEST_F(MtcTrainModels, TrainsTheMoeGptAndShowsItsRouting) {
  std::string out = train("--model=moe_gpt --batch=4 --iterations=3 --warmup=0 --log_every=1 --optimizer=adamw "
                          "--lr=1e-3");
  EXPECT_NE(out.find("model: moe_gpt (2 layers, hidden 64, 4 heads, seq 16, vocab 128, tied head, MoE: 4 experts, "
                     "top-1, capacity factor 1.25, aux 0.01 in 1 of 2 blocks), " +
                     std::to_string(109312 - 33088 + 64 * 4 + 4 * 33088) + " parameters"),
            std::string::npos)
      << out;
  // 64 tokens a batch, capacity ceil(1.25 * 64 / 4) = 20: the counts and drops add up to 64.
  for (size_t at = out.find(" | experts "); at != std::string::npos; at = out.find(" | experts ", at + 1)) {
    int a = 0, b = 0, c = 0, d = 0, dropped = 0;
    ASSERT_EQ(std::sscanf(out.c_str() + at, " | experts %d,%d,%d,%d dropped %d", &a, &b, &c, &d, &dropped), 5) << out;
    EXPECT_EQ(a + b + c + d + dropped, 64) << out;
    EXPECT_LE(std::max({a, b, c, d}), 20) << out;
  }
  EXPECT_NE(out.find("iter 3 loss"), std::string::npos) << out;
  out = train("--model=moe_gpt --batch=4 --iterations=2 --warmup=0 --log_every=1 --moe_experts=2 --moe_top_k=2 "
              "--moe_dropless");
  EXPECT_NE(out.find("MoE: 2 experts, top-2, dropless, aux 0.01"), std::string::npos) << out;
  EXPECT_NE(out.find(" | experts 64,64 dropped 0"), std::string::npos) << out;  // top-2 of 2: every token twice
  // Padded to the capacity: each expert runs on 20 rows, the tokens it took and padding.
  out = train("--model=moe_gpt --batch=4 --iterations=2 --warmup=0 --log_every=1 --moe_bucket=1000");
  EXPECT_NE(out.find("aux 0.01, bucket 1000 in 1 of 2 blocks"), std::string::npos) << out;
  const size_t at = out.find("iter 2 ");
  ASSERT_NE(at, std::string::npos) << out;
  int a = 0, b = 0, c = 0, d = 0, dropped = 0, padded = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + out.find(" | experts ", at), " | experts %d,%d,%d,%d dropped %d padded %d", &a, &b,
                        &c, &d, &dropped, &padded),
            6)
      << out;
  EXPECT_EQ(a + b + c + d + padded, 4 * 20) << out;
}

TEST_F(MtcTrainModels, BadMoeFlags) {
  expect_bad("--model=gpt --moe_experts=4", "--moe_experts with --model gpt: it configures the mixture of experts");
  expect_bad("--model=moe_gpt --moe_experts=1", "--moe_experts '1'");
  expect_bad("--model=moe_gpt --moe_top_k=3", "--moe_top_k '3'");
  expect_bad("--model=moe_gpt --moe_capacity=0", "--moe_capacity '0': expected a number > 0");
  expect_bad("--model=moe_gpt --moe_aux_alpha=-1", "--moe_aux_alpha '-1': expected a number >= 0");
  expect_bad("--model=moe_gpt --moe_dropless --moe_capacity=2", "--moe_capacity with --moe_dropless");
  expect_bad("--model=moe_gpt --moe_bucket=-1", "--moe_bucket '-1'");
  expect_bad("--model=moe_gpt --moe_groups=0", "--moe_groups '0'");
  expect_bad("--model=moe_gpt --moe_expert_parallel --moe_bucket=4", "--moe_expert_parallel with --moe_bucket");
  expect_bad("--model=moe_gpt --moe_expert_parallel --dtp=p1", "--moe_expert_parallel with --dtp");
  expect_bad("--model=moe_gpt --batch=4 --moe_groups=3", "--moe_groups 3: a forward routes 64 tokens");
  expect_bad("--model=moe_gpt --heads=5", "--heads 5 does not divide --hidden 64");
}

TEST_F(MtcTrainModels, BadSposFlags) {
  expect_bad("--model=resnet20 --spos_path=0", "--spos_path with --model resnet20: it chooses the SPOS supernet's path");
  expect_bad("--model=spos --spos_path=0,1", "--spos_path: SPOS path '0,1' has 2 choices: expected 20");
  expect_bad("--model=spos --spos_flops=5", "--spos_flops '5': expected MIN,MAX in millions of multiply-adds");
  expect_bad("--model=spos --spos_flops=360,290", "--spos_flops '360,290': expected MIN,MAX");
  expect_bad("--model=spos --spos_flops=400,500 --image_size=224 --batch=2", "--spos_flops: no SPOS path in 10000");
  expect_bad("--model=spos --spos_flops=1,2 --spos_path=0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0",
             "--spos_path with --spos_flops");
  expect_bad("--model=spos --spos_pool=2 --spos_path=0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0",
             "--spos_path with --spos_pool");
  expect_bad("--model=spos --spos_pool=-1", "--spos_pool '-1'");
  expect_bad("--model=resnet20 --spos_pool=8", "--spos_pool with --model resnet20");
}

}  // namespace
}  // namespace mtc
