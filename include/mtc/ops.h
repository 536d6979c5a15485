// The ops of mtc, as functions on tensor handles. Each issues one op (or a few) to the
// interpreter of its inputs and records autograd history. Shapes follow PyTorch: images
// are NCHW, linear weights are (out_features, in_features), conv weights (OC, IC/groups,
// KH, KW). A shape error does not throw: it poisons the outputs and surfaces at the next
// synchronising call (to_vector, item, sync) with the op's name and input shapes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mtc/tensor.h"

namespace mtc {

// ---- creation (on the current runtime) ----
Tensor from_vector(const Shape& shape, std::span<const float> values, bool persistent = false);
Tensor from_vector_i32(const Shape& shape, std::span<const int32_t> values);
Tensor full(const Shape& shape, float value);
Tensor zeros(const Shape& shape);
// copy_: writes src's values over dst's, in place (same shape and dtype); dst keeps its
// identity. Not recorded for autograd.
void copy_(const Tensor& dst, const Tensor& src);
Tensor ones(const Shape& shape);

// ---- elementwise; binary ops broadcast as NumPy does ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float s);  // x * s
Tensor relu(const Tensor& x);
Tensor swish(const Tensor& x);  // x * sigmoid(x); one fused op, backward keeps only x
Tensor gelu(const Tensor& x);   // exact (erf) form, as torch.nn.GELU()
Tensor sigmoid(const Tensor& x);  // 1 / (1 + exp(-x)); backward keeps only the output
Tensor tanh(const Tensor& x);     // backward keeps only the output

// ---- reductions ----
Tensor sum(const Tensor& x);  // all elements -> shape []
Tensor sum(const Tensor& x, std::vector<int> dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::vector<int> dims, bool keepdim = false);
// sum_to: sums x down to `shape`, the inverse of broadcasting (used by backward rules).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra ----
// matmul: a (..., M, K) x b (..., K, N) -> (..., M, N); batch dims broadcast. A 2-D b
// applies to every batch of a.
Tensor matmul(const Tensor& a, const Tensor& b);
// linear: x (..., IN) with w (OUT, IN) and optional bias (OUT) -> (..., OUT).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());

// ---- convolution and pooling (NCHW) ----
struct Conv2dOptions {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
  static Conv2dOptions make(int stride, int pad, int dilation = 1, int groups = 1) {
    return Conv2dOptions{stride, stride, pad, pad, dilation, dilation, groups};
  }
};
// conv2d: x (N, C, H, W), w (OC, C/groups, KH, KW), bias (OC) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(),
              const Conv2dOptions& o = {});
struct Pool2dOptions {
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_h = 0, pad_w = 0;
  static Pool2dOptions make(int kernel, int stride, int pad = 0) {
    return Pool2dOptions{kernel, kernel, stride, stride, pad, pad};
  }
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o);
// avg_pool2d: padding counts toward the divisor (PyTorch's count_include_pad=True).
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o);
// global_avg_pool: (N, C, H, W) -> (N, C).
Tensor global_avg_pool(const Tensor& x);

// batch_norm: x (N, C, ...) with gamma, beta, running_mean, running_var (C). In training
// it normalises with the batch statistics and updates the running ones in place
// (running = (1 - momentum) * running + momentum * batch, unbiased variance, as PyTorch);
// in eval it uses the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  float momentum = 0.1f, float eps = 1e-5f);
// layer_norm: normalises over the last dimension; gamma and beta are (D,) or undefined.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps = 1e-5f);

// ---- classification ----
Tensor softmax(const Tensor& x, int dim);
Tensor log_softmax(const Tensor& x, int dim);
// cross_entropy: logits (N, C), labels i32 (N) -> mean loss, shape []. Softmax is fused in.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
// topk: x f32 (..., C) -> i32 (..., k), the indices of each row's k largest values,
// largest first (equal values: lower index first; NaN below every number). No gradient.
// topk(x, 1) is argmax.
Tensor topk(const Tensor& x, int k);

// ---- shape and data movement ----
Tensor reshape(const Tensor& x, const Shape& shape);  // one dim may be -1
Tensor flatten(const Tensor& x, int start_dim = 1);   // dims start_dim.. into one
Tensor transpose(const Tensor& x, int d0, int d1);
Tensor permute(const Tensor& x, std::vector<int> dims);
Tensor concat(std::span<const Tensor> xs, int dim);
TensorList split(const Tensor& x, std::vector<int64_t> sizes, int dim);
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end);  // [start, end)
// channel_shuffle: (N, C, H, W) with C = g * k: channel (i, j) moves to (j, i).
Tensor channel_shuffle(const Tensor& x, int groups);

// ---- embedding and dropout ----
// embedding: weight (V, D), indices i32 (...) -> (..., D). An index out of [0, V) is an
// error at execution.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// scatter_add_rows: src (n, D), indices i32 (n) -> (rows, D): row r is the sum of the rows
// of src whose index is r, added in their order (zeros where none is), so the same inputs
// give the same bits. The inverse of gathering rows with embedding(x, indices) (which is
// its gradient); differentiable in src. An index out of [0, rows) is an error at execution.
// Mixture-of-experts combines each expert's outputs into the token rows with it.
Tensor scatter_add_rows(const Tensor& src, const Tensor& indices, int64_t rows);
// dropout: zeroes each element with probability p and scales the rest by 1/(1-p). The
// mask comes from a counter-based generator keyed by a seed recorded in the op, so a
// recompute reproduces the same bits. Identity when !training or p == 0.
Tensor dropout(const Tensor& x, float p, bool training = true);

}  // namespace mtc
