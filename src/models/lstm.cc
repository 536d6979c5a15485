// LstmLm: an LSTM language model unrolled op by op. See include/mtc/models.h.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {

LstmLm::LstmLm(const GptConfig& c) : config(c) {
  const absl::Status s = c.check(/*attention=*/false);
  MTC_CHECK(s.ok(), "LstmLm(", c.describe(), "): ", s.message());
  const int64_t d = c.hidden;
  embed = register_parameter("embed.weight", nn::parameter({c.vocab, d}, nn::normal_values(c.vocab * d, 1.f)));
  const float bound = 1.f / std::sqrt(static_cast<float>(d));  // torch's nn.LSTM
  for (int l = 0; l < c.layers; ++l) {
    w_ih_.push_back(register_parameter(absl::StrCat("lstm.weight_ih_l", l),
                                       nn::parameter({4 * d, d}, nn::uniform_values(4 * d * d, bound))));
    w_hh_.push_back(register_parameter(absl::StrCat("lstm.weight_hh_l", l),
                                       nn::parameter({4 * d, d}, nn::uniform_values(4 * d * d, bound))));
    b_ih_.push_back(register_parameter(absl::StrCat("lstm.bias_ih_l", l), nn::parameter({4 * d}, nn::uniform_values(4 * d, bound))));
    b_hh_.push_back(register_parameter(absl::StrCat("lstm.bias_hh_l", l), nn::parameter({4 * d}, nn::uniform_values(4 * d, bound))));
  }
  head_ = register_module("head", std::make_shared<nn::Linear>(d, c.vocab));
}

Tensor LstmLm::forward(const Tensor& x) {
  if (!token_input_ok(x, config.seq, "lstm")) return reshape(x, {-1, -1});  // poisoned; the error is recorded
  Tensor h_seq = embedding(embed, x);  // (N, T, D)
  if (!h_seq.defined() || h_seq.poisoned()) return h_seq;
  const int64_t n = x.dim(0), t_len = x.dim(1), d = config.hidden;
  for (int l = 0; l < config.layers; ++l) {
    // Every step's input projection at once, (N, T, 4D), split into the steps' (N, 1, 4D):
    // one split, whose backward is one concatenation (a slice per step would give each
    // step's gradient as a zero-padded (N, T, 4D) to be summed T times).
    const TensorList xg = split(linear(h_seq, w_ih_[l], b_ih_[l]), std::vector<int64_t>(t_len, 1), 1);
    Tensor h = zeros({n, d}), c = zeros({n, d});
    std::vector<Tensor> outs;
    for (int64_t t = 0; t < t_len; ++t) {
      const Tensor gates = add(reshape(xg[t], {n, 4 * d}), linear(h, w_hh_[l], b_hh_[l]));
      const TensorList g = split(gates, {d, d, d, d}, 1);  // i, f, g, o
      c = add(mul(sigmoid(g[1]), c), mul(sigmoid(g[0]), tanh(g[2])));
      h = mul(sigmoid(g[3]), tanh(c));
      outs.push_back(reshape(h, {n, 1, d}));
    }
    h_seq = concat(outs, 1);  // (N, T, D)
  }
  return head_->forward(h_seq);
}

}  // namespace mtc::models
