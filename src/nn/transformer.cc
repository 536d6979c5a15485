// The transformer layers: multi-head self-attention (as a function of its weights and as
// a module), attention of projected q, k, v with an optional (causal) mask, the
// feed-forward MLP and the pre-norm encoder block, all on existing ops; and Linear's
// normal initialisation (NormalInit) that GPT uses.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "mtc/interpreter.h"
#include "mtc/nn.h"
#include "mtc/status.h"

namespace mtc::nn {

std::vector<float> normal_values(int64_t n, float std) {
  data::Rng rng = init_rng();
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = rng.normal(0.f, std);
  return v;
}

Tensor multi_head_self_attention(const Tensor& x, const Tensor& qkv_weight, const Tensor& qkv_bias,
                                 const Tensor& proj_weight, const Tensor& proj_bias, int heads) {
  // An undefined or poisoned x: linear reports or propagates it.
  if (!x.defined() || x.poisoned()) return linear(x, proj_weight, proj_bias);
  if (x.ndim() != 3 || heads < 1 || x.dim(2) % heads != 0) {
    x.interpreter()->record_error(absl::InvalidArgumentError(
        absl::StrCat("multi_head_self_attention: x is ", x.desc().str(), " with ", heads,
                     " heads: expected (N, T, D) with D a multiple of the heads")));
    return reshape(x, {-1, -1});  // a poisoned result; the first error recorded is the one reported
  }
  const int64_t n = x.dim(0), t = x.dim(1), dim = x.dim(2);
  const int64_t d = dim / heads;
  // (N, T, 3D) seen as (N, T, 3H, d): heads [0, H) are q, [H, 2H) k, [2H, 3H) v.
  Tensor qkv = reshape(linear(x, qkv_weight, qkv_bias), {n, t, 3 * heads, d});
  TensorList parts = split(qkv, {heads, heads, heads}, 2);  // 3 x (N, T, H, d)
  // The 1/sqrt(d) goes on q (N, H, T, d) rather than on the scores (N, H, T, T), which are
  // larger whenever T > d: (s q) k^T = s (q k^T).
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  Tensor q = scale(permute(parts[0], {0, 2, 1, 3}), s);  // (N, H, T, d)
  Tensor k_t = permute(parts[1], {0, 2, 3, 1});          // (N, H, d, T): k transposed
  Tensor v = permute(parts[2], {0, 2, 1, 3});            // (N, H, T, d)
  Tensor attn = softmax(matmul(q, k_t), -1);             // (N, H, T, T)
  Tensor y = permute(matmul(attn, v), {0, 2, 1, 3});     // (N, T, H, d)
  return linear(reshape(y, {n, t, dim}), proj_weight, proj_bias);
}

Tensor causal_mask(int64_t t) {
  MTC_CHECK(t >= 1, "causal_mask(", t, ")");
  std::vector<float> m(static_cast<size_t>(t * t), 0.f);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = i + 1; j < t; ++j) m[i * t + j] = kMaskedScore;
  }
  return from_vector({t, t}, m, /*persistent=*/true);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads,
                                    const Tensor& mask) {
  // An undefined or poisoned input: reshape reports or propagates it.
  for (const Tensor* x : {&q, &k, &v}) {
    if (!x->defined() || x->poisoned()) return reshape(*x, {-1});
  }
  const bool shapes_ok = q.ndim() == 3 && heads >= 1 && q.dim(2) % heads == 0 && k.shape() == q.shape() &&
                         v.shape() == q.shape();
  const bool mask_ok = !mask.defined() || (mask.ndim() == 2 && mask.dim(0) == mask.dim(1) &&
                                           q.ndim() == 3 && mask.dim(0) >= q.dim(1));
  if (!shapes_ok || !mask_ok) {
    q.interpreter()->record_error(absl::InvalidArgumentError(absl::StrCat(
        "scaled_dot_product_attention: q ", q.desc().str(), ", k ", k.desc().str(), ", v ", v.desc().str(),
        mask.defined() ? ", mask " + mask.desc().str() : std::string(), " with ", heads,
        " heads: expected q, k, v (N, T, D) alike with D a multiple of the heads, and a mask (S, S) with S >= T")));
    return reshape(q, {-1, -1});  // a poisoned result; the first error recorded is the one reported
  }
  const int64_t n = q.dim(0), t = q.dim(1), dim = q.dim(2);
  const int64_t d = dim / heads;
  // (N, T, D) -> (N, T, H, d) -> (N, H, T, d); the 1/sqrt(d) goes on q, as in
  // multi_head_self_attention: (s q) k^T = s (q k^T) on the smaller tensor.
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const Tensor qh = scale(permute(reshape(q, {n, t, heads, d}), {0, 2, 1, 3}), s);  // (N, H, T, d)
  const Tensor k_t = permute(reshape(k, {n, t, heads, d}), {0, 2, 3, 1});          // (N, H, d, T)
  const Tensor vh = permute(reshape(v, {n, t, heads, d}), {0, 2, 1, 3});           // (N, H, T, d)
  Tensor scores = matmul(qh, k_t);                                                 // (N, H, T, T)
  if (mask.defined()) {
    const Tensor m = mask.dim(0) == t ? mask : slice(slice(mask, 0, 0, t), 1, 0, t);
    scores = add(scores, m);  // broadcast over N and H
  }
  const Tensor y = permute(matmul(softmax(scores, -1), vh), {0, 2, 1, 3});  // (N, T, H, d)
  return reshape(y, {n, t, dim});
}

// Linear with NormalInit (GPT-2's initialisation); beside the transformer layers that use it.
Linear::Linear(int64_t in_features, int64_t out_features, NormalInit init, bool has_bias) {
  MTC_CHECK(in_features > 0 && out_features > 0 && init.std >= 0, "Linear(", in_features, ", ", out_features,
            ", std ", init.std, ")");
  weight = register_parameter(
      "weight", parameter({out_features, in_features}, normal_values(out_features * in_features, init.std)));
  if (has_bias) bias = register_parameter("bias", constant_parameter({out_features}, 0.f));
}

MultiheadSelfAttention::MultiheadSelfAttention(int64_t dim, int heads, bool qkv_bias) : heads(heads) {
  MTC_CHECK(dim > 0 && heads > 0 && dim % heads == 0, "MultiheadSelfAttention(dim ", dim, ", heads ", heads, ")");
  qkv = register_module("qkv", std::make_shared<Linear>(dim, 3 * dim, qkv_bias));
  proj = register_module("proj", std::make_shared<Linear>(dim, dim));
}

Tensor MultiheadSelfAttention::forward(const Tensor& x) {
  return multi_head_self_attention(x, qkv->weight, qkv->bias, proj->weight, proj->bias, heads);
}

TransformerMlp::TransformerMlp(int64_t dim, int64_t hidden) {
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, hidden));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, dim));
}

TransformerMlp::TransformerMlp(int64_t dim, int64_t hidden, NormalInit init) {
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, hidden, init));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, dim, init));
}

Tensor TransformerMlp::forward(const Tensor& x) { return fc2->forward(gelu(fc1->forward(x))); }

TransformerBlock::TransformerBlock(int64_t dim, int heads, int mlp_ratio) {
  MTC_CHECK(mlp_ratio >= 1, "TransformerBlock: mlp_ratio ", mlp_ratio);
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(dim));
  attn = register_module("attn", std::make_shared<MultiheadSelfAttention>(dim, heads));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(dim));
  mlp = register_module("mlp", std::make_shared<TransformerMlp>(dim, mlp_ratio * dim));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  Tensor y = add(x, attn->forward(norm1->forward(x)));
  return add(y, mlp->forward(norm2->forward(y)));
}

}  // namespace mtc::nn
