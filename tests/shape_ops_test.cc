// Tests of the data-movement ops (transpose, permute, concat, split, slice,
// channel_shuffle): forward against a double reference, backward against finite
// differences, i32 data, and shape errors surfacing at the next synchronising call.
#include <numeric>
#include <string>

#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc {
namespace {

// permuted: the reference of permute(x, p) for a tensor of any rank.
RefTensor permuted(const RefTensor& x, const std::vector<int>& p) {
  const int nd = static_cast<int>(x.shape.size());
  Shape ys(nd);
  for (int i = 0; i < nd; ++i) ys[i] = x.shape[p[i]];
  RefTensor y(ys);
  Shape xstride(nd, 1);
  for (int i = nd - 2; i >= 0; --i) xstride[i] = xstride[i + 1] * x.shape[i + 1];
  for (int64_t i = 0; i < numel(ys); ++i) {
    int64_t rem = i, off = 0;
    for (int d = nd - 1; d >= 0; --d) {
      off += (rem % ys[d]) * xstride[p[d]];
      rem /= ys[d];
    }
    y.v[i] = x.v[off];
  }
  return y;
}

// sliced: the reference of x[..., first:first+len, ...] along dim (x is (outer, size, inner)).
RefTensor sliced(const RefTensor& x, int dim, int64_t first, int64_t len) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= x.shape[i];
  for (size_t i = dim + 1; i < x.shape.size(); ++i) inner *= x.shape[i];
  Shape ys = x.shape;
  ys[dim] = len;
  RefTensor y(ys);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < len; ++k)
      for (int64_t j = 0; j < inner; ++j) y.v[(o * len + k) * inner + j] = x.v[(o * x.shape[dim] + first + k) * inner + j];
  return y;
}

// joined: the reference of concat(xs, dim).
RefTensor joined(const std::vector<RefTensor>& xs, int dim) {
  Shape ys = xs[0].shape;
  ys[dim] = 0;
  for (const RefTensor& x : xs) ys[dim] += x.shape[dim];
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= ys[i];
  for (size_t i = dim + 1; i < ys.size(); ++i) inner *= ys[i];
  RefTensor y(ys);
  int64_t off = 0;
  for (const RefTensor& x : xs) {
    const int64_t len = x.shape[dim];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < len * inner; ++k) y.v[(o * ys[dim] + off) * inner + k] = x.v[o * len * inner + k];
    off += len;
  }
  return y;
}

// Data movement copies exactly; gradients are exact up to the finite differences' rounding.
constexpr CheckOptions kExact{.fwd_atol = 0, .fwd_rtol = 0, .grad_atol = 1e-7, .grad_rtol = 1e-7};

TEST(ShapeOps, Transpose) {
  auto rt = make_test_runtime();
  check_op({{2, 3, 4}}, [](const TensorList& x) { return transpose(x[0], 0, 2); },
           [](const std::vector<RefTensor>& x) { return permuted(x[0], {2, 1, 0}); }, kExact);
  check_op({{2, 3, 4}}, [](const TensorList& x) { return transpose(x[0], -1, -2); },
           [](const std::vector<RefTensor>& x) { return permuted(x[0], {0, 2, 1}); }, kExact);
}

TEST(ShapeOps, Permute) {
  auto rt = make_test_runtime();
  check_op({{2, 3, 4, 5}}, [](const TensorList& x) { return permute(x[0], {2, 0, 3, 1}); },
           [](const std::vector<RefTensor>& x) { return permuted(x[0], {2, 0, 3, 1}); }, kExact);
  check_op({{3, 4}}, [](const TensorList& x) { return permute(x[0], {-1, 0}); },
           [](const std::vector<RefTensor>& x) { return permuted(x[0], {1, 0}); }, kExact);
}

TEST(ShapeOps, PermuteLargeTakesParallelPath) {
  auto rt = make_test_runtime();
  check_op({{32, 48, 40}}, [](const TensorList& x) { return permute(x[0], {1, 2, 0}); },
           [](const std::vector<RefTensor>& x) { return permuted(x[0], {1, 2, 0}); },
           {.fwd_atol = 0, .fwd_rtol = 0, .check_backward = false});
}

TEST(ShapeOps, Concat) {
  auto rt = make_test_runtime();
  check_op({{2, 1, 3}, {2, 4, 3}, {2, 2, 3}}, [](const TensorList& x) { return concat(x, 1); },
           [](const std::vector<RefTensor>& x) { return joined(x, 1); }, kExact);
  check_op({{3, 2}, {3, 5}}, [](const TensorList& x) { return concat(x, -1); },
           [](const std::vector<RefTensor>& x) { return joined(x, 1); }, kExact);
  check_op({{2, 3}, {1, 3}}, [](const TensorList& x) { return concat(x, 0); },
           [](const std::vector<RefTensor>& x) { return joined(x, 0); }, kExact);
}

TEST(ShapeOps, SplitWithAnOutputThatGetsNoGradient) {
  auto rt = make_test_runtime();
  // parts[1] is unused: its gradient is zeros; parts[0] is scaled and moved last.
  check_op({{2, 6, 3}},
           [](const TensorList& x) {
             TensorList parts = split(x[0], {1, 3, 2}, 1);
             EXPECT_EQ(parts.size(), 3u);
             return concat(TensorList{parts[2], scale(parts[0], 2.f)}, 1);
           },
           [](const std::vector<RefTensor>& x) {
             RefTensor p0 = sliced(x[0], 1, 0, 1);
             for (double& v : p0.v) v *= 2;
             return joined({sliced(x[0], 1, 4, 2), p0}, 1);
           }, kExact);
  check_op({{5, 4}}, [](const TensorList& x) { return split(x[0], {3, 2}, -2)[1]; },
           [](const std::vector<RefTensor>& x) { return sliced(x[0], 0, 3, 2); }, kExact);
}

TEST(ShapeOps, Slice) {
  auto rt = make_test_runtime();
  check_op({{4, 6}}, [](const TensorList& x) { return slice(x[0], 1, 1, 4); },
           [](const std::vector<RefTensor>& x) { return sliced(x[0], 1, 1, 3); }, kExact);
  // Negative bounds count from the end; an end past the extent clamps.
  check_op({{5, 2, 3}}, [](const TensorList& x) { return slice(x[0], 0, -3, -1); },
           [](const std::vector<RefTensor>& x) { return sliced(x[0], 0, 2, 2); }, kExact);
  check_op({{2, 3, 7}}, [](const TensorList& x) { return slice(x[0], -1, 4, 100); },
           [](const std::vector<RefTensor>& x) { return sliced(x[0], 2, 4, 3); }, kExact);
  Tensor empty = slice(zeros({3, 4}), 1, 3, 1);
  EXPECT_EQ(shape_str(empty.shape()), "[3,0]");
  EXPECT_TRUE(empty.to_vector().ok());
}

TEST(ShapeOps, ChannelShuffle) {
  auto rt = make_test_runtime();
  const int g = 3, k = 2;
  check_op({{2, g * k, 2, 3}}, [](const TensorList& x) { return channel_shuffle(x[0], g); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y(x[0].shape);
             for (int n = 0; n < 2; ++n)
               for (int i = 0; i < g; ++i)
                 for (int j = 0; j < k; ++j)
                   for (int h = 0; h < 2; ++h)
                     for (int w = 0; w < 3; ++w) y.at({n, j * g + i, h, w}) = x[0].at({n, i * k + j, h, w});
             return y;
           }, kExact);
}

TEST(ShapeOps, I32DataMovesUnchanged) {
  auto rt = make_test_runtime();
  std::vector<int32_t> v(24);
  std::iota(v.begin(), v.end(), -5);
  Tensor x = from_vector_i32({2, 3, 4}, v);
  std::vector<double> vd(v.begin(), v.end());
  RefTensor rx({2, 3, 4});
  rx.v = vd;
  auto expect_eq = [](const Tensor& t, const RefTensor& r) {
    ASSERT_EQ(t.dtype(), DType::kI32);
    ASSERT_EQ(shape_str(t.shape()), shape_str(r.shape));
    auto got = t.to_vector_i32();
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < r.v.size(); ++i) ASSERT_EQ((*got)[i], static_cast<int32_t>(r.v[i])) << i;
  };
  expect_eq(transpose(x, 0, 1), permuted(rx, {1, 0, 2}));
  expect_eq(permute(x, {2, 1, 0}), permuted(rx, {2, 1, 0}));
  expect_eq(concat(TensorList{x, x}, 2), joined({rx, rx}, 2));
  expect_eq(split(x, {1, 2}, 1)[1], sliced(rx, 1, 1, 2));
  expect_eq(slice(x, 2, 1, 3), sliced(rx, 2, 1, 2));
  expect_eq(channel_shuffle(channel_shuffle(x, 3), 1), rx);
}

TEST(ShapeOps, ShapeErrorsNameWhatWasWrong) {
  auto rt = make_test_runtime();
  Tensor x = zeros({2, 3, 4});
  expect_op_error(transpose(x, 0, 3), {"transpose(d0=0 d1=3) on f32[2,3,4]", "dim 3 is out of range for 3 dims"});
  expect_op_error(permute(x, {0, 1}), {"has 2 dims, input has 3"});
  expect_op_error(permute(x, {0, 1, -3}), {"not a permutation"});
  expect_op_error(concat(TensorList{x, zeros({2, 5, 3})}, 1), {"input 1 is f32[2,5,3]", "every dim but 1"});
  expect_op_error(concat(TensorList{x, from_vector_i32({2, 3, 4}, std::vector<int32_t>(24))}, 0), {"input 1 is i32"});
  expect_op_error(concat(TensorList{}, 0), {"concat of no tensors"});
  expect_op_error(split(x, {1, 1}, 1)[0], {"add up to 2", "extent 3"});
  expect_op_error(split(x, {4, -1}, 2)[0], {"negative"});
  expect_op_error(slice(x, -4, 0, 1), {"dim -4 is out of range"});
  expect_op_error(channel_shuffle(x, 2), {"groups=2 must be positive and divide the 3 channels"});
  expect_op_error(channel_shuffle(zeros({4}), 2), {"at least 2 dims"});
  // The runtime goes on working after the errors.
  EXPECT_TRUE(rt->interpreter().sync().ok());
  EXPECT_EQ(*sum(transpose(ones({2, 3}), 0, 1)).item(), 6.0f);
}

}  // namespace
}  // namespace mtc
