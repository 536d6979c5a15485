// Gpt: a GPT-2-style decoder language model (token and position embeddings, pre-LayerNorm
// blocks of causal attention with separate q, k, v projections and a 4x GELU MLP, final
// LayerNorm, tied or untied LM head), its configurations, and the language-model loss.
#include "absl/strings/str_cat.h"
#include "mtc/interpreter.h"
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {

absl::Status GptConfig::check(bool attention) const {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("gpt ", what)); };
  if (layers < 1) return bad(absl::StrCat("layers ", layers, ": expected >= 1"));
  if (hidden < 1) return bad(absl::StrCat("hidden ", hidden, ": expected >= 1"));
  if (attention && heads < 1) return bad(absl::StrCat("heads ", heads, ": expected >= 1"));
  if (attention && hidden % heads != 0) {
    return bad(absl::StrCat("heads ", heads, " do not divide hidden ", hidden,
                            ": expected a number of heads that divides the hidden width"));
  }
  if (seq < 1) return bad(absl::StrCat("seq ", seq, ": expected >= 1"));
  if (vocab < 1) return bad(absl::StrCat("vocab ", vocab, ": expected >= 1"));
  return absl::OkStatus();
}

std::string GptConfig::describe() const {
  return absl::StrCat(layers, " layers, hidden ", hidden, ", ", heads, " heads, seq ", seq, ", vocab ", vocab,
                      tied_head ? ", tied head" : ", untied head");
}

// Per block: ln1 2D, q k v proj 4 (D^2 + D), ln2 2D, fc1 4D^2 + 4D, fc2 4D^2 + D.
int64_t GptConfig::num_parameters() const {
  const int64_t d = hidden;
  const int64_t block = 2 * d + 4 * (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d);
  return vocab * d + seq * d + layers * block + 2 * d + (tied_head ? 0 : vocab * d);
}

absl::StatusOr<GptConfig> gpt_config(const std::string& name) {
  if (name == "tiny") return GptConfig{};
  if (name == "small") return GptConfig{.layers = 12, .hidden = 768, .heads = 12, .seq = 1024, .vocab = 50257};
  return absl::InvalidArgumentError(absl::StrCat("unknown gpt configuration '", name, "': expected tiny or small"));
}

GptAttention::GptAttention(int64_t dim, int heads, Tensor mask, nn::NormalInit init)
    : heads(heads), mask(std::move(mask)) {
  MTC_CHECK(dim > 0 && heads > 0 && dim % heads == 0, "GptAttention(dim ", dim, ", heads ", heads, ")");
  q = register_module("q", std::make_shared<nn::Linear>(dim, dim, init));
  k = register_module("k", std::make_shared<nn::Linear>(dim, dim, init));
  v = register_module("v", std::make_shared<nn::Linear>(dim, dim, init));
  proj = register_module("proj", std::make_shared<nn::Linear>(dim, dim, init));
}

Tensor GptAttention::forward(const Tensor& x) {
  return proj->forward(nn::scaled_dot_product_attention(q->forward(x), k->forward(x), v->forward(x), heads, mask));
}

GptBlock::GptBlock(int64_t dim, int heads, Tensor mask, nn::NormalInit init, const MoeConfig& moe_config,
                   dist::CommPtr ep) {
  ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(dim));
  attn = register_module("attn", std::make_shared<GptAttention>(dim, heads, std::move(mask), init));
  ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(dim));
  if (moe_config.experts > 0) {
    moe = register_module("moe", std::make_shared<MoeMlp>(dim, 4 * dim, moe_config, init, std::move(ep)));
  } else {
    mlp = register_module("mlp", std::make_shared<nn::TransformerMlp>(dim, 4 * dim, init));
  }
}

Tensor GptBlock::forward(const Tensor& x) {
  Tensor y = add(x, attn->forward(ln1->forward(x)));
  return add(y, moe ? moe->forward(ln2->forward(y)) : mlp->forward(ln2->forward(y)));
}

Gpt::Gpt(const GptConfig& c, const MoeConfig& moe_config, dist::CommPtr ep) : config(c), moe(moe_config) {
  const absl::Status s = c.check();
  MTC_CHECK(s.ok(), "Gpt(", c.describe(), "): ", s.message());
  const nn::NormalInit init;  // std 0.02
  wte = register_parameter("wte", nn::parameter({c.vocab, c.hidden}, nn::normal_values(c.vocab * c.hidden, init.std)));
  wpe = register_parameter("wpe", nn::parameter({c.seq, c.hidden}, nn::normal_values(c.seq * c.hidden, init.std)));
  mask = nn::causal_mask(c.seq);
  blocks_ = register_module("blocks", std::make_shared<nn::Sequential>());
  if (moe.experts > 0) {
    const absl::Status m = moe.check();
    MTC_CHECK(m.ok(), "Gpt(", moe.describe(), "): ", m.message());
  }
  for (int i = 0; i < c.layers; ++i) {
    blocks_->push_back(std::make_shared<GptBlock>(c.hidden, c.heads, mask, init, i % 2 == 1 ? moe : MoeConfig{},
                                                  i % 2 == 1 ? ep : nullptr));
  }
  ln_f_ = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.hidden));
  if (!c.tied_head) lm_head_ = register_module("lm_head", std::make_shared<nn::Linear>(c.hidden, c.vocab, init, false));
}

std::vector<std::shared_ptr<MoeMlp>> Gpt::moe_blocks() const {
  std::vector<std::shared_ptr<MoeMlp>> out;
  for (const auto& [name, child] : blocks_->children()) {
    if (auto* b = dynamic_cast<GptBlock*>(child.get()); b != nullptr && b->moe) out.push_back(b->moe);
  }
  return out;
}

namespace {
template <typename T>
absl::StatusOr<T> recorded(const Tensor& x, absl::StatusOr<T> v) {
  if (!v.ok()) x.interpreter()->record_error(v.status());
  return v;
}
}  // namespace

absl::StatusOr<std::vector<float>> read_in_forward(const Tensor& x) { return recorded(x, x.to_vector()); }
absl::StatusOr<std::vector<int32_t>> read_in_forward_i32(const Tensor& x) { return recorded(x, x.to_vector_i32()); }

bool token_input_ok(const Tensor& x, int64_t seq, const char* model) {
  if (!x.defined() || x.poisoned() || (x.dtype() == DType::kI32 && x.ndim() == 2 && x.dim(1) >= 1 && x.dim(1) <= seq)) {
    return true;  // an undefined or poisoned x is reported or propagated by the first op
  }
  x.interpreter()->record_error(absl::InvalidArgumentError(absl::StrCat(
      model, ": input ", x.desc().str(), ": expected i32 token ids (N, T) with 1 <= T <= seq ", seq)));
  return false;
}

Tensor Gpt::forward(const Tensor& x) {
  if (!token_input_ok(x, config.seq, "gpt")) return reshape(x, {-1, -1});  // poisoned; the error is recorded
  Tensor h = embedding(wte, x);  // (N, T, D); an undefined or poisoned x is reported or propagated here
  if (!h.defined() || h.poisoned()) return h;
  const int64_t t = x.dim(1);
  h = add(h, t == config.seq ? wpe : slice(wpe, 0, 0, t));  // position embedding, broadcast over N
  h = ln_f_->forward(blocks_->forward(h));
  return linear(h, lm_head_ ? lm_head_->weight : wte);  // (N, T, V)
}

Tensor cross_entropy_loss(const Tensor& logits, const Tensor& labels) {
  if (logits.defined() && !logits.poisoned() && logits.ndim() == 3) {
    return cross_entropy(reshape(logits, {-1, logits.dim(2)}), reshape(labels, {-1}));
  }
  return cross_entropy(logits, labels);
}

}  // namespace mtc::models
