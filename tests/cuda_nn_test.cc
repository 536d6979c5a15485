// CUDA-against-CPU tests of the nn ops with CUDA kernels in matmul.cc, softmax.cc,
// layer_norm.cc, embedding.cc and dropout.cc: matmul (batched, broadcast, 2-D b, every
// transpose flag), linear and linear_backward_weight, softmax / log_softmax and their
// gradient, cross_entropy and its gradient, layer_norm and its gradient, embedding and its
// gradient, dropout; forward and backward (through autograd, so the gradient ops run on
// CUDA too), over odd sizes, plus the CPU's errors for labels and indices out of range.
// Without a GPU every test skips.
//
// Tolerances (|cuda - cpu| <= atol + rtol * |cpu|):
//   GEMMs: rtol 1e-4, atol 1e-4 (cuBLAS and OpenBLAS sum K in different orders, in fp32);
//   softmax family, cross_entropy, layer_norm: rtol 1e-4, atol 1e-5 (sums in double on
//     both; CUDA's expf may differ from glibc's by an ulp or two);
//   embedding and dropout: exact (0, 0): the gather copies, the gradient adds in the CPU's
//     order, and dropout's mask is the CPU's generator bit for bit.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd.h"
#include "cuda_check.h"
#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "ops/dropout.h"
#include "ops/matmul.h"

namespace mtc {
namespace {

using cuda_check::compare;
using cuda_check::Input;
using cuda_check::random_input;

constexpr double kGemmRtol = 1e-4, kGemmAtol = 1e-4;
constexpr double kRowRtol = 1e-4, kRowAtol = 1e-5;

// labels: n i32 values in [0, limit) from `seed`.
Input labels(Shape shape, int64_t limit, uint64_t seed) {
  std::mt19937_64 gen(seed);
  Input in{shape, {}, std::vector<int32_t>(static_cast<size_t>(numel(shape))), false};
  for (int32_t& v : in.i32) v = static_cast<int32_t>(gen() % static_cast<uint64_t>(limit));
  return in;
}

// expect_cuda_error: f's first output, computed on CUDA, fails with InvalidArgument
// holding every piece.
void expect_cuda_error(const std::function<TensorList(const TensorList&)>& f,
                       const std::vector<Input>& inputs, const std::vector<std::string>& pieces) {
  auto rt = cuda_check::make_runtime("cuda");
  ASSERT_TRUE(rt);
  TensorList in;
  for (const Input& i : inputs) {
    in.push_back(i.i32.empty() ? from_vector(i.shape, i.f32) : from_vector_i32(i.shape, i.i32));
  }
  const Tensor y = f(in)[0];
  const absl::Status s = y.to_vector().status();
  ASSERT_FALSE(s.ok()) << "expected an error from " << y.desc().str();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : pieces)
    EXPECT_NE(s.message().find(p), std::string::npos) << "missing '" << p << "' in: " << s;
}

// ---- matmul and linear ----

void check_matmul(const Shape& a, const Shape& b, bool ta = false, bool tb = false, uint64_t seed = 1) {
  compare(
      absl::StrCat("matmul ", shape_str(a), " x ", shape_str(b), ta ? " trans_a" : "", tb ? " trans_b" : ""),
      [ta, tb](const TensorList& t) {
        return TensorList{call1(std::make_shared<MatmulOp>(ta, tb), {t[0], t[1]})};
      },
      {random_input(a, seed), random_input(b, seed + 1)}, kGemmRtol, kGemmAtol);
}

TEST(CudaMatmul, TwoD) {
  MTC_SKIP_WITHOUT_GPU();
  check_matmul({3, 4}, {4, 5});
  check_matmul({17, 33}, {33, 9});
  check_matmul({1, 1}, {1, 1});
  check_matmul({65, 1}, {1, 31});  // K = 1
  check_matmul({3, 0}, {0, 4});    // K = 0: y is zeros
}

TEST(CudaMatmul, Batched) {
  MTC_SKIP_WITHOUT_GPU();
  check_matmul({2, 3, 4}, {2, 4, 5});
  check_matmul({2, 3, 7, 5}, {2, 3, 5, 11});
}

TEST(CudaMatmul, TwoDBAppliedToEveryBatch) {
  MTC_SKIP_WITHOUT_GPU();
  check_matmul({3, 5, 7}, {7, 6});  // folded into one GEMM
  check_matmul({2, 3, 5, 7}, {7, 13});
  check_matmul({3, 4}, {2, 4, 5});  // a 2-D a over b's batch: a stride-0 batch
}

TEST(CudaMatmul, BroadcastBatchDims) {
  MTC_SKIP_WITHOUT_GPU();
  check_matmul({2, 1, 3, 4}, {1, 3, 4, 5});     // each operand broadcast in a different dim
  check_matmul({2, 1, 3, 4, 5}, {4, 1, 5, 6});  // outer loop over strided batches
  check_matmul({1, 3, 4}, {5, 3, 4, 2});
  check_matmul({4, 1, 3, 5}, {6, 5, 7});
}

TEST(CudaMatmul, TransposeFlags) {
  MTC_SKIP_WITHOUT_GPU();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{7, 5} : Shape{5, 7}, b = tb ? Shape{9, 7} : Shape{7, 9};
      check_matmul(a, b, ta, tb);
      const Shape ab = ta ? Shape{3, 7, 5} : Shape{3, 5, 7}, bb = tb ? Shape{3, 9, 7} : Shape{3, 7, 9};
      check_matmul(ab, bb, ta, tb);
      const Shape b2 = tb ? Shape{9, 7} : Shape{7, 9};
      check_matmul(ab, b2, ta, tb);
      const Shape a4 = ta ? Shape{2, 1, 7, 5} : Shape{2, 1, 5, 7}, b4 = tb ? Shape{3, 9, 7} : Shape{3, 7, 9};
      check_matmul(a4, b4, ta, tb);
    }
  }
}

void check_linear(const Shape& x, int64_t out, bool bias, uint64_t seed = 7) {
  const int64_t in = x.back();
  std::vector<Input> inputs{random_input(x, seed), random_input({out, in}, seed + 1)};
  if (bias) inputs.push_back(random_input({out}, seed + 2));
  compare(
      absl::StrCat("linear ", shape_str(x), " -> ", out, bias ? " with bias" : ""),
      [bias](const TensorList& t) { return TensorList{linear(t[0], t[1], bias ? t[2] : Tensor())}; }, inputs,
      kGemmRtol, kGemmAtol);
}

// linear's backward runs matmul for dx and linear_backward_weight for dw (and db).
TEST(CudaLinear, ForwardAndBackward) {
  MTC_SKIP_WITHOUT_GPU();
  for (bool bias : {true, false}) {
    check_linear({5, 7}, 3, bias);
    check_linear({2, 3, 7}, 4, bias);
    check_linear({7}, 5, bias);
    check_linear({33, 65}, 17, bias);
    check_linear({4, 50, 31}, 129, bias);  // 200 rows: several row chunks in db's sum
  }
}

// ---- softmax family ----

TEST(CudaSoftmax, SoftmaxAndLogSoftmaxAlongEachDim) {
  MTC_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes{{4, 10}, {3, 5, 7}, {2, 3, 1, 9}, {3, 1037}, {2, 4099}, {1}};
  uint64_t seed = 20;
  for (const Shape& s : shapes) {
    for (int dim = -1; dim < static_cast<int>(s.size()); ++dim) {
      for (bool log : {false, true}) {
        compare(
            absl::StrCat(log ? "log_softmax " : "softmax ", shape_str(s), " dim=", dim),
            [dim, log](const TensorList& t) {
              return TensorList{log ? log_softmax(t[0], dim) : softmax(t[0], dim)};
            },
            {random_input(s, seed++)}, kRowRtol, kRowAtol);
      }
    }
  }
}

TEST(CudaCrossEntropy, LossAndGradient) {
  MTC_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int64_t, int64_t>> sizes{{8, 10}, {1, 1}, {33, 1001}, {5, 3}, {300, 7}};
  uint64_t seed = 40;
  for (auto [n, c] : sizes) {
    compare(
        absl::StrCat("cross_entropy N=", n, " C=", c),
        [](const TensorList& t) { return TensorList{cross_entropy(t[0], t[1])}; },
        {random_input({n, c}, seed), labels({n}, c, seed + 1)}, kRowRtol, kRowAtol);
    seed += 2;
  }
}

TEST(CudaCrossEntropy, LabelOutOfRangeIsAnError) {
  MTC_SKIP_WITHOUT_GPU();
  for (int32_t bad : {4, -1, 100}) {
    Input lab{{3}, {}, {0, 3, bad}, false};
    expect_cuda_error([](const TensorList& t) { return TensorList{cross_entropy(t[0], t[1])}; },
                      {random_input({3, 4}, 1), lab},
                      {absl::StrCat("label ", bad, " at position 2"), "C = 4 classes"});
  }
}

// ---- layer_norm ----

TEST(CudaLayerNorm, ForwardAndBackward) {
  MTC_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes{{4, 16}, {3, 5, 33}, {7, 1003}, {2, 2053}, {300, 9}, {1, 1}};
  uint64_t seed = 60;
  for (const Shape& s : shapes) {
    const int64_t d = s.back();
    for (int affine = 0; affine < 4; ++affine) {
      const bool g = affine & 1, b = affine & 2;
      for (float eps : {1e-5f, 1e-2f}) {
        if (eps != 1e-5f && affine != 3) continue;  // a larger eps with gamma and beta only
        std::vector<Input> inputs{random_input(s, seed++)};
        if (g) inputs.push_back(random_input({d}, seed++));
        if (b) inputs.push_back(random_input({d}, seed++));
        compare(
            absl::StrCat("layer_norm ", shape_str(s), " gamma=", int{g}, " beta=", int{b}, " eps=", eps),
            [g, b, eps](const TensorList& t) {
              return TensorList{layer_norm(t[0], g ? t[1] : Tensor(), b ? t[1 + g] : Tensor(), eps)};
            },
            inputs, kRowRtol, kRowAtol);
      }
    }
  }
}

// ---- embedding ----

TEST(CudaEmbedding, GatherAndGradientAreExact) {
  MTC_SKIP_WITHOUT_GPU();
  struct Case {
    int64_t vocab, d;
    Shape idx;
    int64_t used;  // indices drawn from [0, used): small means many repeats
  };
  const std::vector<Case> cases{{11, 7, {3, 5}, 11},      {50, 33, {200}, 5}, {13, 1, {4, 4}, 13},
                                {1000, 16, {5000}, 1000}, {7, 65, {2049}, 3}, {3, 4, {1}, 3}};
  uint64_t seed = 80;
  for (const Case& c : cases) {
    compare(
        absl::StrCat("embedding V=", c.vocab, " D=", c.d, " indices ", shape_str(c.idx)),
        [](const TensorList& t) { return TensorList{embedding(t[0], t[1])}; },
        {random_input({c.vocab, c.d}, seed), labels(c.idx, c.used, seed + 1)}, 0.0, 0.0);
    seed += 2;
  }
}

TEST(CudaEmbedding, IndexOutOfRangeIsAnError) {
  MTC_SKIP_WITHOUT_GPU();
  for (int32_t bad : {7, -1, 100}) {
    Input idx{{2, 2}, {}, {0, 6, 2, bad}, false};
    expect_cuda_error([](const TensorList& t) { return TensorList{embedding(t[0], t[1])}; },
                      {random_input({7, 3}, 1), idx},
                      {absl::StrCat("index ", bad, " at position 3"), "V = 7"});
  }
}

// ---- dropout ----

TEST(CudaDropout, MaskIsTheCpuMaskBitForBit) {
  MTC_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes{{1000}, {3, 77, 5}, {1}, {65537}};
  uint64_t seed = 100;
  for (const Shape& s : shapes) {
    for (float p : {0.1f, 0.5f, 0.9f}) {
      const uint64_t op_seed = 0x1234abcdULL + seed;
      compare(
          absl::StrCat("dropout ", shape_str(s), " p=", p),
          [p, op_seed](const TensorList& t) {
            return TensorList{call1(std::make_shared<DropoutOp>(p, op_seed), {t[0]})};
          },
          {random_input(s, seed++)}, 0.0, 0.0);
    }
  }
}

}  // namespace
}  // namespace mtc
