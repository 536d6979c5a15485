// TreeLstm: a binary Tree-LSTM over a tree each batch's tokens decide. See
// include/mtc/models.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {

TreeLstm::TreeLstm(const GptConfig& c) : config(c) {
  const absl::Status s = c.check(/*attention=*/false);
  MTC_CHECK(s.ok(), "TreeLstm(", c.describe(), "): ", s.message());
  const int64_t d = c.hidden;
  embed = register_parameter("embed.weight", nn::parameter({c.vocab, d}, nn::normal_values(c.vocab * d, 1.f)));
  cell = register_module("cell", std::make_shared<nn::Linear>(2 * d, 5 * d));
  head = register_module("head", std::make_shared<nn::Linear>(d, c.vocab));
}

std::vector<TreeLstm::Node> TreeLstm::tree_of(std::span<const int32_t> tokens) {
  std::vector<Node> out;
  // build: the span's inner nodes, children first; a span of one token is a leaf.
  auto build = [&](auto&& self, int64_t begin, int64_t end) -> void {
    if (end - begin < 2) return;
    // Split after the largest token of [begin, end - 1): both sides keep at least one.
    const int64_t split = std::max_element(tokens.begin() + begin, tokens.begin() + end - 1) - tokens.begin() + 1;
    self(self, begin, split);
    self(self, split, end);
    out.push_back(Node{begin, split, end});
  };
  build(build, 0, static_cast<int64_t>(tokens.size()));
  return out;
}

Tensor TreeLstm::forward(const Tensor& x) {
  if (!token_input_ok(x, config.seq, "treelstm")) return reshape(x, {-1, -1});  // poisoned; the error is recorded
  Tensor leaves = embedding(embed, x);  // (N, T, D)
  if (!leaves.defined() || leaves.poisoned()) return leaves;
  const int64_t n = x.dim(0), t_len = x.dim(1), d = config.hidden;
  // The structure comes from the data: the first sequence's tokens, read on the host.
  absl::StatusOr<std::vector<int32_t>> ids = read_in_forward_i32(slice(x, 0, 0, 1));
  if (!ids.ok()) return reshape(x, {-1, -1});
  const std::vector<Node> nodes = tree_of(*ids);
  if (nodes.empty()) return head->forward(leaves);
  // A node's children are the nodes (or leaves) that start its two halves: the state
  // (h, c) of the latest node made over a span is kept at the span's first position, a
  // leaf's (its embedding, 0) until then. parent[t]: h of t's lowest inner node.
  const TensorList leaf = split(leaves, std::vector<int64_t>(t_len, 1), 1);  // one backward concat
  const Tensor zero = zeros({n, d});
  std::vector<Tensor> node_h(t_len), node_c(t_len, zero), parent(t_len);
  for (int64_t t = 0; t < t_len; ++t) node_h[t] = reshape(leaf[t], {n, d});
  for (const Node& nd : nodes) {
    const Tensor hl = node_h[nd.begin], hr = node_h[nd.split];
    const TensorList g = split(cell->forward(concat(std::vector<Tensor>{hl, hr}, 1)), {d, d, d, d, d}, 1);
    const Tensor cn = add(add(mul(sigmoid(g[0]), tanh(g[4])), mul(sigmoid(g[1]), node_c[nd.begin])),
                          mul(sigmoid(g[2]), node_c[nd.split]));
    const Tensor hn = mul(sigmoid(g[3]), tanh(cn));
    // Leaves directly under this node have it as their lowest inner node.
    if (nd.split - nd.begin == 1) parent[nd.begin] = hn;
    if (nd.end - nd.split == 1) parent[nd.split] = hn;
    node_h[nd.begin] = hn;
    node_c[nd.begin] = cn;
  }
  const Tensor root = node_h[0];
  std::vector<Tensor> outs;
  for (int64_t t = 0; t < t_len; ++t) outs.push_back(reshape(add(parent[t], root), {n, 1, d}));
  return head->forward(concat(outs, 1));
}

}  // namespace mtc::models
