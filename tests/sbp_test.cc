// Tests of DTP's per-op placement tables (src/ops/sbp.h and each op's sbp()): for every
// op, every signature its table lists for p = 2, 3 and 4 ranks (and those it lists with
// no group size, OpDef::signatures), p ranks are emulated in one process: each rank's
// local inputs are cut from random global ones (R: the whole; S(d): its shard by
// partition::shard_range; P: random summands of the value), the rank's op (shard_op, or
// the op) runs on them through autograd's call, and the ranks' outputs combined by the
// output placements (S: shards concatenated; R: each rank's equal to the whole; P:
// summed) must equal the op on the global inputs. Inputs an op writes in place
// (optimizer state, running statistics) are compared the same way, by their input
// placement.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd.h"
#include "dist/dtp.h"
#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"
#include "ops/batch_norm.h"
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/reshape.h"
#include "ops/sbp.h"
#include "ops/shape_ops.h"
#include "ops/softmax.h"
#include "optim/step_ops.h"
#include "partition/placement.h"

namespace mtc {
namespace {

using partition::Kind;
using partition::Mode;
using partition::Placement;
using partition::Signature;
using partition::SignatureList;

// Host: a tensor's values on the host, f32 or i32 (kept as doubles).
struct Host {
  TensorDesc desc;
  std::vector<double> v;
};

// Input: one input of a case: its global description and, for i32, the value range.
struct Input {
  TensorDesc desc;
  int int_max = 0;  // i32: values in [0, int_max)
  double lo = -1, hi = 1;
};
Input f32(Shape s, double lo = -1, double hi = 1) { return Input{TensorDesc{std::move(s), DType::kF32}, 0, lo, hi}; }
Input i32(Shape s, int max) { return Input{TensorDesc{std::move(s), DType::kI32}, max}; }

struct Case {
  std::string name;
  std::shared_ptr<const OpDef> op;
  std::vector<Input> in;
  // needs_comm: a signature whose local run takes the group's communicator (left to the
  // mpirun tests).
  bool (*needs_comm)(const Signature&) = nullptr;
};

// slab: view of a shape around dim d as (outer, size, inner).
void around(const Shape& s, int d, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int i = 0; i < d; ++i) outer *= s[i];
  for (size_t i = d + 1; i < s.size(); ++i) inner *= s[i];
}

// shard: rank r's shard of x under S(d).
Host shard(const Host& x, int d, int parts, int r) {
  const partition::Range rg = partition::shard_range(x.desc.shape[d], parts, r);
  int64_t outer, inner;
  around(x.desc.shape, d, outer, inner);
  Host y{x.desc, {}};
  y.desc.shape[d] = rg.size;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = rg.offset; k < rg.offset + rg.size; ++k)
      for (int64_t i = 0; i < inner; ++i) y.v.push_back(x.v[(o * x.desc.shape[d] + k) * inner + i]);
  return y;
}

// gather: the shards of S(d), concatenated.
Host gather(const std::vector<Host>& parts, int d, const TensorDesc& global) {
  Host y{global, std::vector<double>(static_cast<size_t>(global.numel()), 0.0)};
  int64_t outer, inner;
  around(global.shape, d, outer, inner);
  for (size_t r = 0; r < parts.size(); ++r) {
    const partition::Range rg = partition::shard_range(global.shape[d], static_cast<int>(parts.size()), static_cast<int>(r));
    size_t at = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = rg.offset; k < rg.offset + rg.size; ++k)
        for (int64_t i = 0; i < inner; ++i) y.v[(o * global.shape[d] + k) * inner + i] = parts[r].v[at++];
  }
  return y;
}

Tensor to_tensor(const Host& h) {
  if (h.desc.dtype == DType::kI32) {
    std::vector<int32_t> v(h.v.begin(), h.v.end());
    return from_vector_i32(h.desc.shape, v);
  }
  std::vector<float> v(h.v.begin(), h.v.end());
  return from_vector(h.desc.shape, v);
}

Host to_host(const Tensor& t) {
  Host h{TensorDesc{t.shape(), t.dtype()}, {}};
  if (t.dtype() == DType::kI32) {
    auto v = t.to_vector_i32();
    EXPECT_TRUE(v.ok()) << v.status();
    if (v.ok()) h.v.assign(v->begin(), v->end());
  } else {
    auto v = t.to_vector();
    EXPECT_TRUE(v.ok()) << v.status();
    if (v.ok()) h.v.assign(v->begin(), v->end());
  }
  return h;
}

// Run: the op on these inputs; outputs and then the inputs it mutates, read back.
std::vector<Host> run(const std::shared_ptr<const OpDef>& op, const std::vector<Host>& in) {
  TensorList ts;
  for (const Host& h : in) ts.push_back(to_tensor(h));
  TensorList outs = call(op, std::span<const Tensor>(ts.data(), ts.size()));
  std::vector<Host> r;
  for (const Tensor& t : outs) r.push_back(to_host(t));
  for (size_t i = 0; i < ts.size(); ++i) {
    if (op->mutates_inputs() >> i & 1) r.push_back(to_host(ts[i]));
  }
  return r;
}

bool close(const Host& got, const Host& want, std::string* why) {
  if (got.desc.shape != want.desc.shape) {
    *why = absl::StrCat("shape ", shape_str(got.desc.shape), " vs ", shape_str(want.desc.shape));
    return false;
  }
  for (size_t i = 0; i < want.v.size(); ++i) {
    const double tol = 2e-5 * (1.0 + std::fabs(want.v[i]));
    if (!(std::fabs(got.v[i] - want.v[i]) <= tol)) {
      *why = absl::StrCat("element ", i, ": ", got.v[i], " vs ", want.v[i]);
      return false;
    }
  }
  return true;
}

// check_case: every signature of the case's op on p ranks against the op on the global inputs.
// *checked: how many signatures were checked.
void check_case(const Case& c, int parts, std::mt19937& rng, int* checked) {
  std::vector<TensorDesc> descs;
  for (const Input& i : c.in) descs.push_back(i.desc);
  std::vector<Host> global;
  for (const Input& i : c.in) {
    Host h{i.desc, {}};
    if (i.desc.dtype == DType::kI32) {
      std::uniform_int_distribution<int> u(0, i.int_max - 1);
      for (int64_t k = 0; k < i.desc.numel(); ++k) h.v.push_back(u(rng));
    } else {
      std::uniform_real_distribution<double> u(i.lo, i.hi);
      for (int64_t k = 0; k < i.desc.numel(); ++k) h.v.push_back(static_cast<float>(u(rng)));
    }
    global.push_back(std::move(h));
  }
  const std::vector<Host> want = run(c.op, global);
  std::vector<TensorDesc> out_descs;
  for (const Host& h : want) out_descs.push_back(h.desc);
  const size_t n_out = static_cast<size_t>(std::max(c.op->num_outputs(), 0));

  SignatureList sigs;
  c.op->signatures(descs, parts, sigs);
  for (const Signature& s : sigs) {
    for (size_t i = 0; i < s.in.size() && i < descs.size(); ++i) {
      if (s.in[i].split()) {
        EXPECT_TRUE(partition::splittable(descs[i].shape, s.in[i].dim, parts)) << s.str() << " input " << i;
      }
    }
  }
  // Those listed for any group size (parts 0) must hold for every p: checked
  // here where their splits fit p.
  SignatureList any;
  c.op->signatures(descs, 0, any);
  for (const Signature& s : any) {
    bool fits = s.in.size() == descs.size();
    for (size_t i = 0; fits && i < s.in.size(); ++i) {
      if (s.in[i].split()) fits = partition::splittable(descs[i].shape, s.in[i].dim, parts);
    }
    if (fits && std::none_of(sigs.begin(), sigs.end(), [&](const Signature& t) { return t.str() == s.str(); })) {
      sigs.push_back(s);
    }
  }
  EXPECT_FALSE(sigs.empty()) << c.name;
  *checked = 0;
  for (const Signature& s : sigs) {
    if (c.needs_comm != nullptr && c.needs_comm(s)) {
      ++*checked;  // listed; run under mpirun
      continue;
    }
    const std::string where = absl::StrCat(c.name, " p=", parts, " ", s.str());
    SCOPED_TRACE(where);
    ASSERT_EQ(s.in.size(), c.in.size());
    EXPECT_EQ(s.out.size(), n_out);
    // Every split must be of a dim with at least p elements.
    for (size_t i = 0; i < s.out.size() && i < out_descs.size(); ++i) {
      if (s.out[i].split()) {
        EXPECT_TRUE(partition::splittable(out_descs[i].shape, s.out[i].dim, parts)) << "output " << i;
      }
    }
    std::vector<std::vector<Host>> got(parts);  // per rank
    for (int r = 0; r < parts; ++r) {
      std::vector<Host> local;
      for (size_t i = 0; i < global.size(); ++i) {
        const Placement p = s.in[i];
        if (p.split()) {
          local.push_back(shard(global[i], p.dim, parts, r));
        } else if (p.partial()) {
          // Summands: random ones on ranks 0..p-2, the rest on the last rank. The
          // emulation draws them all here, from a generator seeded per input.
          Host h = global[i];
          std::mt19937 g(1000 + static_cast<unsigned>(i));
          std::uniform_real_distribution<double> u(-1, 1);
          std::vector<double> acc(h.v.size(), 0.0);
          for (int q = 0; q < parts - 1; ++q) {
            for (size_t k = 0; k < h.v.size(); ++k) {
              const double x = static_cast<float>(u(g));
              if (q == r) h.v[k] = x;
              acc[k] += x;
            }
          }
          if (r == parts - 1) {
            for (size_t k = 0; k < h.v.size(); ++k) h.v[k] = static_cast<float>(global[i].v[k] - acc[k]);
          }
          local.push_back(std::move(h));
        } else {
          local.push_back(global[i]);
        }
      }
      ShardContext g;
      g.parts = parts;
      g.index = r;
      std::shared_ptr<const OpDef> op = c.op->shard_op(s, descs, g);
      got[r] = run(op ? op : c.op, local);
      ASSERT_EQ(got[r].size(), want.size());
    }
    // Outputs, then mutated inputs with their input placement.
    for (size_t k = 0; k < want.size(); ++k) {
      Placement p;
      if (k < n_out) {
        p = s.out[k];
      } else {
        size_t seen = 0, idx = 0;
        for (size_t i = 0; i < c.in.size(); ++i) {
          if (c.op->mutates_inputs() >> i & 1) {
            if (seen++ == k - n_out) idx = i;
          }
        }
        p = s.in[idx];
      }
      std::string why;
      if (p.split()) {
        std::vector<Host> parts_k;
        bool shapes = true;
        for (int r = 0; r < parts; ++r) {
          const Shape local = partition::local_shape(want[k].desc.shape, p, parts, r);
          EXPECT_EQ(got[r][k].desc.shape, local) << "result " << k;
          shapes = shapes && got[r][k].desc.shape == local;
          parts_k.push_back(got[r][k]);
        }
        if (!shapes) continue;
        EXPECT_TRUE(close(gather(parts_k, p.dim, want[k].desc), want[k], &why)) << "result " << k << ": " << why;
      } else if (p.partial()) {
        Host sum = got[0][k];
        for (int r = 1; r < parts; ++r) {
          ASSERT_EQ(got[r][k].v.size(), sum.v.size());
          for (size_t e = 0; e < sum.v.size(); ++e) sum.v[e] += got[r][k].v[e];
        }
        EXPECT_TRUE(close(sum, want[k], &why)) << "result " << k << " (summed): " << why;
      } else {
        for (int r = 0; r < parts; ++r) EXPECT_TRUE(close(got[r][k], want[k], &why)) << "result " << k << " rank " << r << ": " << why;
      }
    }
    ++*checked;
  }
}

// check_all: each case on 2, 3 and 4 ranks; expect_min: signatures the case must have
// for p = 2 (beyond all R), so that a table that lost its entries fails.
void check_all(const std::vector<Case>& cases) {
  auto rt = make_test_runtime(true);
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    for (int p : {2, 3, 4}) {
      int n = 0;
      check_case(c, p, rng, &n);
      EXPECT_GE(n, 2) << c.name << " p=" << p << ": only all-R";
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

bool has_sig(const OpDef& op, std::vector<TensorDesc> in, int parts, const std::string& s) {
  SignatureList l;
  op.signatures(in, parts, l);
  for (const Signature& t : l) {
    if (t.str() == s) return true;
  }
  return false;
}

TensorDesc fd(Shape s) { return TensorDesc{std::move(s), DType::kF32}; }

std::shared_ptr<const OpDef> sgd(float momentum) {
  auto op = std::make_shared<optim::SgdStepOp>();
  op->lr = 0.1f;
  op->momentum = momentum;
  op->weight_decay = 0.01f;
  return op;
}
std::shared_ptr<const OpDef> adamw() {
  auto op = std::make_shared<optim::AdamWStepOp>();
  op->decay = 0.999f;
  op->step_size = 0.01f;
  op->bias_correction2_sqrt = 0.3f;
  return op;
}

// ---- linear, matmul ----
TEST(Sbp, LinearAndMatmul) {
  check_all({
      {"linear bias", std::make_shared<LinearOp>(true), {f32({5, 6, 7}), f32({9, 7}), f32({9})}},
      {"linear", std::make_shared<LinearOp>(false), {f32({6, 5}), f32({7, 5})}},
      {"linear small out", std::make_shared<LinearOp>(true), {f32({6, 5}), f32({3, 5}), f32({3})}},
      {"matmul weight", std::make_shared<MatmulOp>(), {f32({5, 6, 4}), f32({4, 7})}},
      {"matmul batched", std::make_shared<MatmulOp>(), {f32({3, 5, 6}), f32({3, 6, 7})}},
      {"matmul broadcast", std::make_shared<MatmulOp>(), {f32({4, 1, 5, 6}), f32({3, 6, 7})}},
      {"matmul trans_a", std::make_shared<MatmulOp>(true, false), {f32({2, 6, 5}), f32({2, 6, 7})}},
      {"matmul trans_b", std::make_shared<MatmulOp>(false, true), {f32({2, 5, 6}), f32({7, 6})}},
  });
  // The modes of linear, and the split dims smaller than p left out.
  EXPECT_TRUE(has_sig(LinearOp(true), {fd({8, 6}), fd({9, 6}), fd({9})}, 4, "(S(0), R, R) -> S(0) [p1]"));
  EXPECT_TRUE(has_sig(LinearOp(true), {fd({8, 6}), fd({9, 6}), fd({9})}, 4, "(S(1), S(1), R) -> P [p3]"));
  EXPECT_TRUE(has_sig(LinearOp(true), {fd({8, 6}), fd({9, 6}), fd({9})}, 4, "(R, S(0), S(0)) -> S(1) [p4]"));
  EXPECT_FALSE(has_sig(LinearOp(true), {fd({3, 6}), fd({9, 6}), fd({9})}, 4, "(S(0), R, R) -> S(0) [p1]"));
  EXPECT_TRUE(has_sig(LinearOp(true), {fd({3, 6}), fd({9, 6}), fd({9})}, 3, "(S(0), R, R) -> S(0) [p1]"));
  EXPECT_TRUE(has_sig(MatmulOp(), {fd({8, 6}), fd({6, 4})}, 4, "(S(1), S(0)) -> P [p3]"));
  EXPECT_TRUE(has_sig(MatmulOp(), {fd({2, 8, 6}), fd({2, 6, 4})}, 2, "(S(2), S(1)) -> P"));
}

// ---- elementwise ----
TEST(Sbp, Elementwise) {
  check_all({
      {"add broadcast", std::make_shared<BinaryOp>(BinaryKind::kAdd), {f32({5, 6, 7}), f32({6, 7})}},
      {"sub", std::make_shared<BinaryOp>(BinaryKind::kSub), {f32({5, 6}), f32({5, 6})}},
      {"mul broadcast", std::make_shared<BinaryOp>(BinaryKind::kMul), {f32({5, 1, 7}), f32({5, 6, 7})}},
      {"scale", std::make_shared<ScaleOp>(0.5f), {f32({5, 6})}},
      {"relu", std::make_shared<ActOp>(ActKind::kRelu), {f32({5, 6})}},
      {"gelu", std::make_shared<ActOp>(ActKind::kGelu), {f32({4, 7})}},
      {"swish", std::make_shared<ActOp>(ActKind::kSwish), {f32({7, 4})}},
      {"sigmoid", std::make_shared<ActOp>(ActKind::kSigmoid), {f32({6, 5})}},
      {"tanh", std::make_shared<ActOp>(ActKind::kTanh), {f32({5, 7})}},
      {"expand", std::make_shared<ExpandOp>(Shape{5, 6, 7}), {f32({6, 1})}},
  });
}

// ---- reductions, reshape, permute ----
TEST(Sbp, ReduceReshapePermute) {
  check_all({
      {"sum dim 1", std::make_shared<ReduceSumOp>(std::vector<bool>{false, true, false}, Shape{5, 7}, 1.f), {f32({5, 6, 7})}},
      {"mean dim 1 keepdim", std::make_shared<ReduceSumOp>(std::vector<bool>{false, true, false}, Shape{5, 1, 7}, 1.f / 6),
       {f32({5, 6, 7})}},
      {"mean all", std::make_shared<ReduceSumOp>(std::vector<bool>{true, true}, Shape{}, 1.f / 30), {f32({5, 6})}},
      {"sum_to", std::make_shared<ReduceSumOp>(std::vector<bool>{true, false, false}, Shape{6, 7}, 1.f), {f32({5, 6, 7})}},
      {"reshape merge", std::make_shared<ReshapeOp>(Shape{24, 10}), {f32({6, 4, 10})}},
      {"reshape heads", std::make_shared<ReshapeOp>(Shape{6, 4, 3, -1}), {f32({6, 4, 12})}},
      {"reshape heads back", std::make_shared<ReshapeOp>(Shape{6, 4, 12}), {f32({6, 4, 6, 2})}},
      {"flatten", std::make_shared<ReshapeOp>(Shape{5, -1}), {f32({5, 3, 2, 2})}},
      {"permute", std::make_shared<PermuteOp>(false, std::vector<int>{2, 0, 1}), {f32({5, 6, 7})}},
      {"transpose", std::make_shared<PermuteOp>(true, std::vector<int>{-1, 1}), {f32({2, 5, 6, 7})}},
  });
  // (N, T, D) S(0) -> (N*T, D) S(0) only where N's shards are whole blocks of N*T's.
  const ReshapeOp merge(Shape{24, 10});
  EXPECT_TRUE(has_sig(merge, {fd({6, 4, 10})}, 3, "(S(0)) -> S(0)"));
  EXPECT_FALSE(has_sig(merge, {fd({6, 4, 10})}, 4, "(S(0)) -> S(0)"));
  EXPECT_FALSE(has_sig(merge, {fd({6, 4, 10})}, 0, "(S(0)) -> S(0)"));
  EXPECT_TRUE(has_sig(merge, {fd({6, 4, 10})}, 0, "(S(2)) -> S(1)"));
  // D = 12 split into 4 heads of 3: whole heads on 2 and 4 ranks, not on 3.
  const ReshapeOp heads(Shape{6, 4, 4, 3});
  EXPECT_TRUE(has_sig(heads, {fd({6, 4, 12})}, 4, "(S(2)) -> S(2)"));
  EXPECT_TRUE(has_sig(heads, {fd({6, 4, 12})}, 2, "(S(2)) -> S(2)"));
  EXPECT_FALSE(has_sig(heads, {fd({6, 4, 12})}, 3, "(S(2)) -> S(2)"));
}

// ---- normalisation, softmax, loss ----
TEST(Sbp, NormSoftmaxLoss) {
  check_all({
      {"layer_norm", std::make_shared<LayerNormOp>(1e-5f, true, true), {f32({5, 6, 8}), f32({8}), f32({8})}},
      {"layer_norm bare", std::make_shared<LayerNormOp>(1e-5f, false, false), {f32({7, 8})}},
      {"softmax", std::make_shared<SoftmaxOp>(1, false), {f32({5, 6, 7})}},
      {"log_softmax", std::make_shared<SoftmaxOp>(-1, true), {f32({5, 6, 7})}},
      {"cross_entropy", std::make_shared<CrossEntropyOp>(), {f32({9, 5}, -3, 3), i32({9}, 5)}},
  });
  // No split of the normalised dim.
  EXPECT_FALSE(has_sig(SoftmaxOp(1, false), {fd({5, 6, 7})}, 2, "(S(1)) -> S(1)"));
  EXPECT_FALSE(has_sig(LayerNormOp(1e-5f, false, false), {fd({5, 6})}, 2, "(S(1)) -> S(1)"));
}

// ---- conv, pools, batch norm, embedding ----
TEST(Sbp, ConvPoolBatchNormEmbedding) {
  const Conv2dOptions pad1 = Conv2dOptions::make(1, 1);
  check_all({
      {"conv2d bias", std::make_shared<Conv2dOp>(pad1, true), {f32({5, 6, 5, 5}), f32({7, 6, 3, 3}), f32({7})}},
      {"conv2d", std::make_shared<Conv2dOp>(Conv2dOptions::make(2, 0), false), {f32({4, 5, 6, 6}), f32({6, 5, 2, 2})}},
      {"conv2d grouped", std::make_shared<Conv2dOp>(Conv2dOptions::make(1, 1, 1, 2), true),
       {f32({4, 6, 4, 4}), f32({6, 3, 3, 3}), f32({6})}},
      {"conv2d depthwise", std::make_shared<Conv2dOp>(Conv2dOptions::make(1, 1, 1, 7), true),
       {f32({4, 7, 4, 4}), f32({7, 1, 3, 3}), f32({7})}},
      {"max_pool2d", std::make_shared<MaxPool2dOp>(Pool2dOptions::make(2, 2)), {f32({5, 6, 4, 4})}},
      {"avg_pool2d", std::make_shared<AvgPool2dOp>(Pool2dOptions::make(3, 2, 1)), {f32({5, 6, 5, 5})}},
      {"global_avg_pool", std::make_shared<GlobalAvgPoolOp>(), {f32({5, 6, 3, 3})}},
      {"batch_norm train", std::make_shared<BatchNormOp>(true, 0.1f, 1e-5f, true),
       {f32({6, 5, 3, 3}), f32({5}), f32({5}), f32({5}), f32({5}, 0.5, 1.5)},
       [](const Signature& s) { return s.in[0] == Placement::S(0); }},
      {"batch_norm train untracked", std::make_shared<BatchNormOp>(true, 0.1f, 1e-5f, false),
       {f32({6, 5}), f32({5}), f32({5})}, [](const Signature& s) { return s.in[0] == Placement::S(0); }},
      {"batch_norm eval", std::make_shared<BatchNormOp>(false, 0.1f, 1e-5f, true),
       {f32({6, 5, 3, 4}), f32({5}), f32({5}), f32({5}), f32({5}, 0.5, 1.5)}},
      {"embedding", std::make_shared<EmbeddingOp>(), {f32({11, 6}), i32({4, 5}, 11)}},
      {"embedding 1-d", std::make_shared<EmbeddingOp>(), {f32({7, 5}), i32({9}, 7)}},
  });
  // The modes: conv's P3 and P4 only for groups 1, depthwise with no mode.
  const Conv2dOp conv(Conv2dOptions::make(1, 1), true);
  EXPECT_TRUE(has_sig(conv, {fd({4, 6, 5, 5}), fd({8, 6, 3, 3}), fd({8})}, 4, "(S(1), S(1), R) -> P [p3]"));
  EXPECT_TRUE(has_sig(conv, {fd({4, 6, 5, 5}), fd({8, 6, 3, 3}), fd({8})}, 4, "(R, S(0), S(0)) -> S(1) [p4]"));
  EXPECT_TRUE(has_sig(BatchNormOp(true, 0.1f, 1e-5f, true), {fd({4, 6, 5, 5}), fd({6}), fd({6}), fd({6}), fd({6})}, 4,
                      "(S(0), R, R, R, R) -> S(0), R, R"));
  EXPECT_TRUE(has_sig(EmbeddingOp(), {fd({8, 6}), TensorDesc{Shape{3, 5}, DType::kI32}}, 2, "(S(0), R) -> P [p3]"));
}

// The vocabulary shard's gradient: only its own rows, from the indices that fall in them.
TEST(Sbp, EmbeddingVocabularyShardGradient) {
  auto rt = make_test_runtime(true);
  std::vector<float> w(5 * 2);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  // Rows 2..4 of a 5-row table.
  Tensor shard = from_vector({3, 2}, std::span<const float>(w.data() + 4, 6)).set_requires_grad(true);
  Tensor idx = from_vector_i32({4}, std::vector<int32_t>{4, 0, 2, 4});
  Tensor y = call1(std::make_shared<EmbeddingOp>(2, 5), {shard, idx});
  auto yv = y.to_vector();
  ASSERT_TRUE(yv.ok()) << yv.status();
  EXPECT_EQ(*yv, (std::vector<float>{8, 9, 0, 0, 4, 5, 8, 9}));
  ASSERT_TRUE(sum(mul(y, from_vector({4, 2}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}))).backward().ok());
  auto g = shard.grad().to_vector();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, (std::vector<float>{5, 6, 0, 0, 8, 10}));
  // An index outside the global table is still an error.
  Tensor bad = call1(std::make_shared<EmbeddingOp>(2, 5), {shard, from_vector_i32({1}, std::vector<int32_t>{5})});
  EXPECT_FALSE(bad.to_vector().ok());
}

// ---- shape ops, dropout, optimizer steps ----
TEST(Sbp, ShapeOpsDropoutSteps) {
  check_all({
      {"concat", std::make_shared<ConcatOp>(1), {f32({5, 2, 7}), f32({5, 3, 7}), f32({5, 4, 7})}},
      {"split", std::make_shared<SplitOp>(std::vector<int64_t>{2, 3, 4}, -2), {f32({5, 9, 7})}},
      {"slice", std::make_shared<SliceOp>(1, 2, -2), {f32({5, 9, 7})}},
      {"channel_shuffle", std::make_shared<ChannelShuffleOp>(2), {f32({4, 6, 5, 3})}},
      {"dropout", std::make_shared<DropoutOp>(0.3f, 1234), {f32({6, 7})}},
      {"sgd_step", sgd(0.f), {f32({6, 5}), f32({6, 5})}},
      {"sgd_step momentum", sgd(0.9f), {f32({6, 5}), f32({6, 5}), f32({6, 5})}},
      {"adamw_step", adamw(), {f32({5, 6}), f32({5, 6}), f32({5, 6}), f32({5, 6}, 0.1, 1)}},
  });
  EXPECT_FALSE(has_sig(ConcatOp(1), {fd({5, 2, 7}), fd({5, 3, 7})}, 2, "(S(1), S(1)) -> S(1)"));
  EXPECT_FALSE(has_sig(DropoutOp(0.5f, 1), {fd({8, 8})}, 2, "(S(0)) -> S(0)"));
}

// A split batch's cross_entropy: each rank's gradient is its rows' share of the global mean's.
TEST(Sbp, CrossEntropyDivisorReachesTheGradient) {
  auto rt = make_test_runtime(true);
  std::vector<float> x = {0.1f, -0.4f, 0.3f, 1.2f, -0.7f, 0.2f};
  Tensor logits = from_vector({3, 2}, x).set_requires_grad(true);
  Tensor labels = from_vector_i32({3}, std::vector<int32_t>{0, 1, 1});
  Tensor whole = call1(std::make_shared<CrossEntropyOp>(), {logits, labels});
  ASSERT_TRUE(whole.backward().ok());
  auto g_whole = logits.grad().to_vector();
  ASSERT_TRUE(g_whole.ok());
  // Rank 0 of 2 holds rows 0 and 1 of 3.
  Tensor part = from_vector({2, 2}, std::span<const float>(x.data(), 4)).set_requires_grad(true);
  Tensor part_labels = from_vector_i32({2}, std::vector<int32_t>{0, 1});
  Tensor loss = call1(std::make_shared<CrossEntropyOp>(3.0), {part, part_labels});
  ASSERT_TRUE(loss.backward().ok());
  auto g_part = part.grad().to_vector();
  ASSERT_TRUE(g_part.ok());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR((*g_part)[i], (*g_whole)[i], 1e-6) << i;
}

// A forced mode an input cannot take names the op and its modes (partition::choose on the
// op's table).
TEST(Sbp, ForcedModeErrorNamesTheOpAndItsModes) {
  const LinearOp op(true);
  const std::vector<TensorDesc> in = {fd({8, 6}), fd({9, 6}), fd({9})};
  SignatureList sigs;
  op.signatures(in, 2, sigs);
  // The weight and bias are stored replicated parameters (never converted): P3 needs the
  // weight split.
  const std::vector<Placement> have = {Placement::S(0), Placement::R(), Placement::R()};
  const std::vector<partition::Fixed> fixed = {partition::Fixed::kAny, partition::Fixed::kNever, partition::Fixed::kNever};
  auto c = partition::choose(op.name(), sigs, have, in, fixed, 2, Mode::kP3);
  ASSERT_FALSE(c.ok());
  const std::string m(c.status().message());
  EXPECT_NE(m.find("op linear"), std::string::npos) << m;
  EXPECT_NE(m.find("p1, p3, p4"), std::string::npos) << m;
  // P1 fits as they are.
  auto p1 = partition::choose(op.name(), sigs, have, in, fixed, 2, Mode::kP1);
  ASSERT_TRUE(p1.ok()) << p1.status();
  EXPECT_EQ(sigs[p1->index].mode, Mode::kP1);
  EXPECT_EQ(p1->bytes, 0);
}

}  // namespace
}  // namespace mtc
