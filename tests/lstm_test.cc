// The recurrent models: the LSTM language model (src/models/lstm.cc): parameter count and
// names as torch's nn.Embedding + nn.LSTM + nn.Linear, its logits against a direct
// evaluation of the LSTM equations in double on the host, bad inputs refused, its loss
// falling; the Tree-LSTM (src/models/tree_lstm.cc): the trees its tokens decide, its
// output shape (one token included) and its loss falling over batches of other trees.
#include <cmath>
#include <functional>
#include <set>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/runtime.h"
#include "op_check.h"

namespace mtc {
namespace {

models::GptConfig config(int layers, int64_t hidden, int64_t seq, int vocab) {
  models::GptConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = 1;
  c.seq = seq;
  c.vocab = vocab;
  return c;
}

// torch: Embedding(V, D) V D; LSTM(D, D, L) per layer 4D (D + D) + 8D; Linear(D, V) D V + V.
TEST(LstmLm, ParameterCountAndNames) {
  auto rt = make_test_runtime();
  const int64_t d = 32, v = 100;
  models::LstmLm m(config(2, d, 8, v));
  EXPECT_EQ(m.num_parameters(), v * d + 2 * (8 * d * d + 8 * d) + (d * v + v));
  const auto named = m.named_parameters();
  ASSERT_EQ(named.size(), 1u + 2 * 4 + 2);
  EXPECT_EQ(named[0].first, "embed.weight");
  EXPECT_EQ(named[1].first, "lstm.weight_ih_l0");
  EXPECT_EQ(named[4].first, "lstm.bias_hh_l0");
  EXPECT_EQ(named[5].first, "lstm.weight_ih_l1");
  EXPECT_EQ(named.back().first, "head.bias");
  EXPECT_TRUE(models::is_language_model("lstm"));
  auto made = models::make_model("lstm", {.gpt = config(1, 16, 12, 50)});
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(shape_str(made->sample_shape), "[12]");
}

// One layer, D 3, V 5, 2 sequences of 4 tokens: the logits against the LSTM equations
// (i, f, g, o = the four row blocks of W_ih x + b_ih + W_hh h + b_hh; c = s(f) c + s(i)
// tanh(g); h = s(o) tanh(c)) evaluated in double from the model's own parameters.
TEST(LstmLm, LogitsMatchTheEquations) {
  auto rt = make_test_runtime();
  const int64_t d = 3, v = 5, n = 2, t_len = 4;
  models::LstmLm m(config(1, d, t_len, v));
  const std::vector<int32_t> tokens = {0, 3, 1, 4, 2, 2, 0, 1};
  Tensor y = m.forward(from_vector_i32({n, t_len}, tokens));
  ASSERT_EQ(y.desc().str(), "f32[2,4,5]");
  const std::vector<float> got = *y.to_vector();
  std::vector<std::vector<float>> p;
  for (const auto& [name, t] : m.named_parameters()) p.push_back(*t.to_vector());
  const auto &emb = p[0], &wih = p[1], &whh = p[2], &bih = p[3], &bhh = p[4], &hw = p[5], &hb = p[6];
  auto sig = [](double z) { return 1 / (1 + std::exp(-z)); };
  double max_diff = 0;
  for (int64_t s = 0; s < n; ++s) {
    std::vector<double> h(d, 0), c(d, 0);
    for (int64_t t = 0; t < t_len; ++t) {
      const int tok = tokens[s * t_len + t];
      std::vector<double> gate(4 * d);
      for (int64_t r = 0; r < 4 * d; ++r) {
        double z = bih[r] + bhh[r];
        for (int64_t k = 0; k < d; ++k) z += wih[r * d + k] * emb[tok * d + k] + whh[r * d + k] * h[k];
        gate[r] = z;
      }
      for (int64_t k = 0; k < d; ++k) {
        c[k] = sig(gate[d + k]) * c[k] + sig(gate[k]) * std::tanh(gate[2 * d + k]);
        h[k] = sig(gate[3 * d + k]) * std::tanh(c[k]);
      }
      for (int64_t o = 0; o < v; ++o) {
        double z = hb[o];
        for (int64_t k = 0; k < d; ++k) z += hw[o * d + k] * h[k];
        max_diff = std::max(max_diff, std::abs(z - got[(s * t_len + t) * v + o]));
      }
    }
  }
  EXPECT_LT(max_diff, 1e-5) << "largest difference from the equations";
}

TEST(LstmLm, InputsItCannotTakeAreErrors) {
  auto rt = make_test_runtime();
  models::LstmLm m(config(1, 8, 4, 10));
  Tensor y = m.forward(from_vector_i32({1, 6}, std::vector<int32_t>(6, 1)));  // 6 tokens > seq 4
  auto v = y.to_vector();
  ASSERT_FALSE(v.ok());
  EXPECT_NE(std::string(v.status().message()).find("lstm: input i32[1,6]: expected i32 token ids (N, T) with 1 <= T <= seq 4"),
            std::string::npos)
      << v.status();
}

// train: `iterations` AdamW steps (lr 1e-2) of language model `name` on a pool of `pool`
// batches of 8 sequences of 16 tokens from 128; `seen` is told each host batch first.
std::vector<float> train(const std::string& name, const models::GptConfig& c, int pool, int iterations,
                         const std::function<void(const data::HostBatch&)>& seen = {}) {
  RuntimeOptions o;
  o.memory_bytes = size_t{256} << 20;
  o.num_threads = 2;
  o.seed = 1;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return {};
  auto m = models::make_model(name, {.gpt = c});
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  auto opt = optim::AdamW::create(m->net->parameters(), {.lr = 1e-2f});
  EXPECT_TRUE(opt.ok());
  data::SyntheticTokens src(16, 128, pool);
  std::vector<float> l;
  for (int it = 0; it < iterations; ++it) {
    const data::HostBatch b = src.batch_at(it % pool, 8);
    if (seen) seen(b);
    auto loss = models::train_step(*m->net, **opt, data::to_device(b));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return l;
    l.push_back(*loss->item());
  }
  std::printf("  %s: iter 1 loss %.4f, the last two %.4f %.4f\n", name.c_str(), l[0], l[iterations - 2],
              l[iterations - 1]);
  return l;
}

// 2 layers of 64, a pool of 2 batches: the first loss near ln 128 = 4.85, the mean of the
// last two below 70% of it.
TEST(TrainLstm, LossFalls) {
  const std::vector<float> l = train("lstm", config(2, 64, 16, 128), 2, 30);
  ASSERT_EQ(l.size(), 30u);
  EXPECT_NEAR(l[0], std::log(128.f), 0.3f);
  EXPECT_LT((l[28] + l[29]) / 2, 0.7f * l[0]);
}

// A span splits after its largest token (the first of equals), the last token aside.
TEST(TreeLstm, TheTokensDecideTheTree) {
  using Node = models::TreeLstm::Node;
  auto tree = [](std::vector<int32_t> t) {
    std::string s;
    for (const Node& n : models::TreeLstm::tree_of(t)) s += absl::StrCat("[", n.begin, ",", n.split, ",", n.end, ")");
    return s;
  };
  EXPECT_EQ(tree({5}), "");
  EXPECT_EQ(tree({5, 1}), "[0,1,2)");
  // 9 at position 1: (0 1 | 2 3); each half of two splits in the middle.
  EXPECT_EQ(tree({3, 9, 2, 7}), "[0,1,2)[2,3,4)[0,2,4)");
  // Rising tokens: the largest but the last is the third: a left-leaning chain.
  EXPECT_EQ(tree({1, 2, 3, 4}), "[0,1,2)[0,2,3)[0,3,4)");
  // Equal tokens: the first of them, so a right-leaning chain.
  EXPECT_EQ(tree({4, 4, 4, 4}), "[2,3,4)[1,2,4)[0,1,4)");
}

TEST(TreeLstm, ParametersAndOutputShape) {
  auto rt = make_test_runtime();
  const int64_t d = 16, v = 40;
  auto m = models::make_model("treelstm", {.gpt = config(1, d, 10, v)});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->net->num_parameters(), v * d + (2 * d * 5 * d + 5 * d) + (d * v + v));
  for (int64_t t : {1, 2, 7}) {
    std::vector<int32_t> tokens(3 * t);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7) % v);
    Tensor y = m->net->forward(from_vector_i32({3, t}, tokens));
    EXPECT_EQ(y.desc().str(), absl::StrCat("f32[3,", t, ",40]"));
    const std::vector<float> values = *y.to_vector();  // a range-for over *temporary would dangle
    for (float x : values) EXPECT_TRUE(std::isfinite(x));
  }
}

// D 64, a pool of 4 batches (four trees).
TEST(TrainTreeLstm, LossFallsOverBatchesOfOtherTrees) {
  std::set<std::string> trees;
  const std::vector<float> l = train("treelstm", config(1, 64, 16, 128), 4, 40, [&](const data::HostBatch& b) {
    const std::vector<int32_t> first(b.tokens.begin(), b.tokens.begin() + 16);
    std::string s;
    for (const auto& n : models::TreeLstm::tree_of(first)) s += absl::StrCat(n.split, ",");
    trees.insert(s);
  });
  ASSERT_EQ(l.size(), 40u);
  EXPECT_EQ(trees.size(), 4u) << "each batch of the pool builds its own tree";
  EXPECT_NEAR(l[0], std::log(128.f), 0.5f);
  EXPECT_LT((l[38] + l[39]) / 2, 0.7f * l[0]);
}

}  // namespace
}  // namespace mtc
