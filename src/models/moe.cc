// Mixture of experts: MoeConfig, the router's top-k routing with a capacity (moe_route),
// the load-balancing loss (moe_aux_loss) and MoeMlp, the layer that moe_gpt puts in every
// other block. docs/dynamic-models.md, "Mixture of experts".
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "mtc/distributed.h"
#include "mtc/interpreter.h"
#include "mtc/models.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc::models {

absl::Status MoeConfig::check() const {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("moe ", what)); };
  if (experts < 2) return bad(absl::StrCat("experts ", experts, ": expected >= 2"));
  if (top_k != 1 && top_k != 2) return bad(absl::StrCat("top_k ", top_k, ": expected 1 (Switch) or 2 (GShard)"));
  if (!(capacity_factor > 0) || !std::isfinite(capacity_factor)) {
    return bad(absl::StrCat("capacity factor ", capacity_factor, ": expected a number > 0"));
  }
  if (!(aux_alpha >= 0) || !std::isfinite(aux_alpha)) {
    return bad(absl::StrCat("aux alpha ", aux_alpha, ": expected a number >= 0"));
  }
  if (bucket < 0) return bad(absl::StrCat("bucket ", bucket, ": expected >= 0 (0: exact token counts)"));
  if (groups < 1) return bad(absl::StrCat("groups ", groups, ": expected >= 1"));
  return absl::OkStatus();
}

int64_t MoeConfig::rows(int64_t n, int64_t capacity) const {
  if (bucket <= 0) return n;
  const int64_t r = std::max<int64_t>(1, (n + bucket - 1) / bucket) * bucket;
  return capacity > 0 ? std::min(r, capacity) : r;  // n <= capacity: routing kept no more
}

std::string MoeConfig::describe() const {
  return absl::StrCat(experts, " experts, top-", top_k, ", ",
                      dropless ? std::string("dropless") : absl::StrCat("capacity factor ", capacity_factor),
                      ", aux ", aux_alpha, bucket > 0 ? absl::StrCat(", bucket ", bucket) : "",
                      groups > 1 ? absl::StrCat(", ", groups, " groups") : "");
}

MoeAssignment moe_route(std::span<const float> probs, int64_t tokens, const MoeConfig& c) {
  const int e = c.experts, k = c.top_k, g = c.groups;
  MTC_CHECK(e >= 1 && k >= 1 && k <= e && g >= 1 && tokens % g == 0 &&
                static_cast<int64_t>(probs.size()) == tokens * e,
            "moe_route: ", probs.size(), " probabilities for ", tokens, " tokens of ", e, " experts, top-", k, ", ", g,
            " groups");
  const int64_t per_group = tokens / g;
  MoeAssignment a;
  a.tokens.resize(static_cast<size_t>(e));
  a.first_share.assign(static_cast<size_t>(g) * e, 0.0);
  a.capacity = c.dropless ? 0
                          : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(c.capacity_factor * k *
                                                                                  static_cast<double>(per_group) / e)));
  // choice[t * k + j]: token t's j-th expert, by probability, the lower expert on a tie.
  std::vector<int> choice(static_cast<size_t>(tokens * k));
  std::vector<int> order(static_cast<size_t>(e));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* p = probs.data() + t * e;
    for (int i = 0; i < e; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int x, int y) { return p[x] > p[y] || (p[x] == p[y] && x < y); });
    for (int j = 0; j < k; ++j) choice[t * k + j] = order[j];
    a.first_share[(t / per_group) * e + order[0]] += 1.0 / static_cast<double>(per_group);
  }
  // Group by group, first choices before second ones, each in token order, as GShard
  // fills its buffers; each group has its own C places per expert.
  std::vector<int64_t> used(static_cast<size_t>(e));
  for (int64_t grp = 0; grp < g; ++grp) {
    std::fill(used.begin(), used.end(), 0);
    for (int j = 0; j < k; ++j) {
      for (int64_t t = grp * per_group; t < (grp + 1) * per_group; ++t) {
        const int ex = choice[t * k + j];
        if (!c.dropless && used[ex] >= a.capacity) {
          ++a.dropped;
          continue;
        }
        ++used[ex];
        a.tokens[ex].push_back(static_cast<int32_t>(t));
      }
    }
  }
  return a;
}

Tensor moe_aux_loss(const Tensor& probs, std::span<const double> first_share, float alpha) {
  const int64_t e = probs.dim(1), g = static_cast<int64_t>(first_share.size()) / e, t = probs.dim(0);
  MTC_CHECK(g >= 1 && g * e == static_cast<int64_t>(first_share.size()) && t % g == 0, "moe_aux_loss: ",
            first_share.size(), " shares for ", e, " experts and ", t, " tokens");
  std::vector<float> f(first_share.begin(), first_share.end());
  // P per group: the mean over each group's tokens, (G, E); the loss is the groups' mean.
  const Tensor p_mean = mean(reshape(probs, {g, t / g, e}), {1});
  return scale(sum(mul(p_mean, from_vector({g, e}, f))), alpha * static_cast<float>(e) / static_cast<float>(g));
}

MoeMlp::MoeMlp(int64_t dim, int64_t hidden, const MoeConfig& c, nn::NormalInit init, dist::CommPtr ep_comm)
    : config(c), ep(ep_comm != nullptr && ep_comm->world_size() > 1 ? std::move(ep_comm) : nullptr) {
  const absl::Status s = c.check();
  MTC_CHECK(s.ok(), "MoeMlp(", c.describe(), "): ", s.message());
  const int ranks = ep ? ep->world_size() : 1;
  MTC_CHECK(c.experts % ranks == 0 && (ep == nullptr || c.bucket == 0), "MoeMlp(", c.describe(), ") over ", ranks,
            " ranks: expected experts a multiple of the ranks, and no bucket");
  const int per_rank = c.experts / ranks;
  first_expert = (ep ? ep->rank() : 0) * per_rank;
  router = register_module("router", std::make_shared<nn::Linear>(dim, c.experts, init, false));
  // Every rank draws every expert's initial values, in order, and keeps its own.
  for (int i = 0; i < c.experts; ++i) {
    auto expert = std::make_shared<nn::TransformerMlp>(dim, hidden, init);
    if (i >= first_expert && i < first_expert + per_rank) {
      experts.push_back(register_module(absl::StrCat("experts.", i), std::move(expert)));
    }
  }
}

Tensor MoeMlp::forward(const Tensor& x) {
  if (!x.defined() || x.poisoned() || x.ndim() < 1) return x;
  const int64_t d = x.dim(x.ndim() - 1), e = config.experts;
  const Tensor flat = reshape(x, {-1, d});  // (T, D)
  const int64_t t = flat.dim(0);
  if (t % config.groups != 0) {
    x.interpreter()->record_error(absl::InvalidArgumentError(absl::StrCat(
        "moe: ", t, " tokens do not split into ", config.groups, " groups: expected a multiple of the groups")));
    return x;
  }
  const Tensor probs = softmax(router->forward(flat), 1);  // (T, E)
  // The routing is decided on the host: the token counts are the shapes of what follows.
  absl::StatusOr<std::vector<float>> p = read_in_forward(probs);
  if (!p.ok()) return x;
  routing_ = moe_route(*p, t, config);
  aux_ = moe_aux_loss(probs, routing_.first_share, config.aux_alpha);
  // The gates (T * E, 1), and with bucketing a last row of 0 for the padding rows.
  Tensor gates = reshape(probs, {t * e, 1});
  if (ep != nullptr) return reshape(expert_parallel(flat, gates), x.shape());
  if (config.bucket > 0) gates = concat(std::vector<Tensor>{gates, zeros({1, 1})}, 0);
  Tensor out;
  routing_.padded = 0;
  for (int64_t i = 0; i < e; ++i) {
    // Padding rows (MoeConfig::bucket) repeat token 0 with the gate 0: they add 0 to its
    // output row and nothing to any gradient. An expert with no tokens and no bucket still
    // runs, on (0, D), so that it has a (zero) gradient.
    std::vector<int32_t> rows = routing_.tokens[i];
    const int64_t n = static_cast<int64_t>(rows.size()), m = config.rows(n, routing_.capacity);
    std::vector<int32_t> gate_rows(static_cast<size_t>(m), static_cast<int32_t>(t * e));
    for (int64_t r = 0; r < n; ++r) gate_rows[r] = static_cast<int32_t>(rows[r] * e + i);
    rows.resize(static_cast<size_t>(m), 0);
    routing_.padded += m - n;
    const Tensor index = from_vector_i32({m}, rows);
    const Tensor h = experts[i]->forward(embedding(flat, index));
    const Tensor y = mul(h, embedding(gates, from_vector_i32({m}, gate_rows)));  // (m, D) * (m, 1)
    const Tensor back = scatter_add_rows(y, index, t);
    out = out.defined() ? add(out, back) : back;
  }
  const Shape shape = x.shape();
  return reshape(out, shape);
}

// expert_parallel: MoeMlp's forward with the experts spread over `ep`'s ranks (see
// models.h). Rows travel in expert order, so rank q's block holds its experts' rows one
// expert after another, and each expert's rows, rank by rank, in token order: what one
// rank with a group per rank gives the expert.
Tensor MoeMlp::expert_parallel(const Tensor& flat, const Tensor& gates) {
  const int ranks = ep->world_size();
  const int64_t e = config.experts, per_rank = e / ranks, t = flat.dim(0);
  std::vector<int32_t> mine(static_cast<size_t>(e));
  for (int64_t i = 0; i < e; ++i) mine[i] = static_cast<int32_t>(routing_.tokens[i].size());
  // Every rank's token count per expert, (ranks x E), read on the host: the exchange's shapes.
  absl::StatusOr<std::vector<int32_t>> counts = read_in_forward_i32(dist::all_gather(from_vector_i32({e}, mine), ep));
  if (!counts.ok()) return flat;
  const std::vector<int32_t>& all = *counts;
  std::vector<int32_t> send_tokens, send_gates;
  std::vector<int64_t> send_rows(static_cast<size_t>(ranks), 0), recv_rows(static_cast<size_t>(ranks), 0);
  for (int64_t i = 0; i < e; ++i) {
    for (int32_t tok : routing_.tokens[i]) {
      send_tokens.push_back(tok);
      send_gates.push_back(static_cast<int32_t>(tok * e + i));
    }
    send_rows[i / per_rank] += static_cast<int64_t>(routing_.tokens[i].size());
  }
  std::vector<int64_t> from(static_cast<size_t>(ranks), 0);  // where rank q's block starts here
  int64_t received = 0;
  for (int q = 0; q < ranks; ++q) {
    from[q] = received;
    for (int64_t j = 0; j < per_rank; ++j) recv_rows[q] += all[q * e + first_expert + j];
    received += recv_rows[q];
  }
  const int64_t sent = static_cast<int64_t>(send_tokens.size());
  const Tensor token_index = from_vector_i32({sent}, send_tokens);
  const Tensor x_recv = dist::all_to_all(embedding(flat, token_index), send_rows, recv_rows, ep);  // (received, D)
  Tensor y_recv;
  std::vector<int64_t> at = from;  // the next row of rank q's block
  for (int64_t j = 0; j < per_rank; ++j) {
    std::vector<int32_t> rows;
    for (int q = 0; q < ranks; ++q) {
      const int64_t n = all[q * e + first_expert + j];
      for (int64_t k = 0; k < n; ++k) rows.push_back(static_cast<int32_t>(at[q] + k));
      at[q] += n;
    }
    // An expert that received no rows still runs, on (0, D): its gradient is then 0.
    const Tensor index = from_vector_i32({static_cast<int64_t>(rows.size())}, rows);
    const Tensor back = scatter_add_rows(experts[j]->forward(embedding(x_recv, index)), index, received);
    y_recv = y_recv.defined() ? add(y_recv, back) : back;
  }
  const Tensor y_send = dist::all_to_all(y_recv, recv_rows, send_rows, ep);  // (sent, D), as sent
  const Tensor weighted = mul(y_send, embedding(gates, from_vector_i32({sent}, send_gates)));
  return scatter_add_rows(weighted, token_index, t);
}

}  // namespace mtc::models
