// DTP's placement conversions (dist::convert, src/dist/convert_ops.h) across ranks. Run
// under mpirun with 2, 3 and 4 ranks and alone on the local backend
// (tests/dist_tests.cmake); every rank runs every test.
//  - forward: every conversion (S(d) -> R, S(d) -> S(d'), P -> R, P -> S(d), R -> S(d))
//    on every dimension of a 3-D and a 4-D tensor whose sizes do not divide by the ranks
//    (and, in the 4-D one, a dimension of 2: empty shards on 3 and 4 ranks) equals the
//    expected shard exactly: the global tensor is built on every rank from a formula
//    (integers, so sums are exact), each rank takes its shard with shard_range;
//  - backward: the objective J = sum over ranks r of <c_r, convert(x)_r>, c_r
//    rank-dependent integers: each rank's gradient equals the adjoint computed on the host
//    from every rank's c_s, exactly, and central differences of J, perturbing one element
//    of one rank's shard at a time;
//  - with MTC_TESTING_BREAK_CONVERT_BACKWARD=all_gather (a ctest of its own), the same
//    check finds every all_gather's gradient wrong, and only those;
//  - errors: a shard of the wrong shape, R -> P, a split dimension out of range.
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "dist/convert_ops.h"
#include "gtest/gtest.h"
#include "mpitest_main.h"
#include "mtc/interpreter.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"
#include "partition/placement.h"

namespace mtc {
namespace {

using partition::Placement;
using partition::Step;

dist::CommPtr g_comm;
int g_rank = 0, g_size = 1;

// ---- host helpers (collectives on raw host buffers: MPI or local alike) ----

float host_sum(float v) {
  float out = 0;
  absl::Status s = g_comm->all_reduce(&v, &out, 1, comm::DataType::kF32, comm::ReduceOp::kSum)->wait();
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

float host_bcast(float v, int root) {
  absl::Status s = g_comm->broadcast(&v, 1, comm::DataType::kF32, root)->wait();
  EXPECT_TRUE(s.ok()) << s;
  return v;
}

// part: rank r's addend of global element gi (small integers); the global tensor is the
// sum of every rank's part (so a Partial tensor holds exactly these).
float part(int r, int64_t gi) { return static_cast<float>((gi * 7 + r * 13) % 19 - 9); }
float global_value(int64_t gi) {
  float s = 0;
  for (int r = 0; r < g_size; ++r) s += part(r, gi);
  return s;
}
// weight: c_r, element j of rank r's output in the objective.
float weight(int r, int64_t j) { return static_cast<float>((j * 5 + r * 11) % 13 - 6); }

// held: whether rank r's shard of a tensor of global shape g under placement pl holds
// global element gi, and at which local index.
bool held(const Shape& g, Placement pl, int r, int64_t gi, int64_t* local) {
  if (!pl.split()) {
    *local = gi;
    return true;
  }
  const Shape ls = partition::local_shape(g, pl, g_size, r);
  const partition::Range s = partition::shard_range(g[pl.dim], g_size, r);
  int64_t rest = gi, li = 0, lstride = 1;
  for (int i = static_cast<int>(g.size()) - 1; i >= 0; --i) {
    int64_t c = rest % g[i];
    rest /= g[i];
    if (i == pl.dim) {
      if (c < s.offset || c >= s.offset + s.size) return false;
      c -= s.offset;
    }
    li += c * lstride;
    lstride *= ls[i];
  }
  *local = li;
  return true;
}

// shard: rank r's local values under pl (for P: rank r's parts).
std::vector<float> shard(const Shape& g, Placement pl, int r) {
  std::vector<float> v(numel(partition::local_shape(g, pl, g_size, r)));
  for (int64_t gi = 0; gi < numel(g); ++gi) {
    int64_t li;
    if (held(g, pl, r, gi, &li)) v[li] = pl.partial() ? part(r, gi) : global_value(gi);
  }
  return v;
}

// adjoint: the gradient of J with respect to rank r's shard, from every rank's weights.
std::vector<float> adjoint(const Shape& g, Placement from, Placement to, int r) {
  std::vector<float> grad(numel(partition::local_shape(g, from, g_size, r)), 0.f);
  for (int64_t gi = 0; gi < numel(g); ++gi) {
    int64_t li, lo;
    if (!held(g, from, r, gi, &li)) continue;
    if (from.replicated()) {  // each rank's copy feeds only its own output
      if (held(g, to, r, gi, &lo)) grad[li] = weight(r, lo);
      continue;
    }
    float s = 0;  // S or P: element gi of the global tensor reaches every rank holding it
    for (int q = 0; q < g_size; ++q)
      if (held(g, to, q, gi, &lo)) s += weight(q, lo);
    grad[li] = s;
  }
  return grad;
}

std::vector<float> weights(const Shape& g, Placement to, int r) {
  std::vector<float> c(numel(partition::local_shape(g, to, g_size, r)));
  for (size_t j = 0; j < c.size(); ++j) c[j] = weight(r, static_cast<int64_t>(j));
  return c;
}

std::vector<float> values(const Tensor& t) {
  auto v = t.to_vector();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

// conversions: every (from, to) a signature can ask for on a tensor of nd dims, from != to.
std::vector<std::pair<Placement, Placement>> conversions(int nd) {
  std::vector<Placement> all{Placement::R(), Placement::P()};
  for (int d = 0; d < nd; ++d) all.push_back(Placement::S(d));
  std::vector<std::pair<Placement, Placement>> out;
  for (Placement f : all)
    for (Placement t : all) {
      if (!(f == t) && !t.partial()) out.emplace_back(f, t);
    }
  return out;
}

std::string name(const Shape& g, Placement f, Placement t) {
  return partition::describe(TensorDesc{g, DType::kF32}, f) + " -> " + t.str();
}

const Shape kShapes[] = {{5, 7, 11}, {2, 3, 5, 7}};

TEST(Convert, EveryConversionOnEveryDimensionIsExact) {
  for (const Shape& g : kShapes) {
    const TensorDesc global{g, DType::kF32};
    for (auto [from, to] : conversions(static_cast<int>(g.size()))) {
      SCOPED_TRACE(name(g, from, to));
      Tensor x = from_vector(partition::local_shape(g, from, g_size, g_rank), shard(g, from, g_rank));
      Tensor y = dist::convert(x, global, from, to, g_comm);
      ASSERT_EQ(y.shape(), partition::local_shape(g, to, g_size, g_rank));
      const std::vector<float> got = values(y), want = shard(g, to, g_rank);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
    }
  }
}

TEST(Convert, SameOnBothSidesIsTheInput) {
  const Shape g{5, 7, 11};
  for (Placement pl : {Placement::R(), Placement::P(), Placement::S(1)}) {
    Tensor x = from_vector(partition::local_shape(g, pl, g_size, g_rank), shard(g, pl, g_rank));
    EXPECT_EQ(dist::convert(x, TensorDesc{g, DType::kF32}, pl, pl, g_comm).id(), x.id());
  }
}

TEST(Convert, IntegerTensorsAreExact) {
  const Shape g{3, 7, 5};
  const TensorDesc global{g, DType::kI32};
  for (auto [from, to] : {std::pair{Placement::S(1), Placement::S(2)}, std::pair{Placement::S(2), Placement::R()},
                          std::pair{Placement::P(), Placement::S(1)}, std::pair{Placement::P(), Placement::R()}}) {
    SCOPED_TRACE(name(g, from, to));
    const std::vector<float> xf = shard(g, from, g_rank), want = shard(g, to, g_rank);
    std::vector<int32_t> xi(xf.begin(), xf.end());
    Tensor y = dist::convert(from_vector_i32(partition::local_shape(g, from, g_size, g_rank), xi), global, from,
                             to, g_comm);
    auto got = y.to_vector_i32();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ((*got)[i], static_cast<int32_t>(want[i])) << i;
  }
}

// A split dimension smaller than the ranks: the last ranks hold empty shards, and every
// conversion still gives each rank exactly its shard (checked above too, with [2,3,5,7]).
TEST(Convert, DimensionSmallerThanTheRanksLeavesEmptyShards) {
  const Shape g{1, 3, 2};
  const TensorDesc global{g, DType::kF32};
  for (auto [from, to] : conversions(3)) {
    SCOPED_TRACE(name(g, from, to));
    Tensor x = from_vector(partition::local_shape(g, from, g_size, g_rank), shard(g, from, g_rank));
    const std::vector<float> got = values(dist::convert(x, global, from, to, g_comm)), want = shard(g, to, g_rank);
    ASSERT_EQ(got, want);
  }
}

TEST(Convert, BadArgumentsAreErrorsNamingWhatWasExpected) {
  const Shape g{5, 7, 11};
  const TensorDesc global{g, DType::kF32};
  Tensor wrong = zeros({4, 7, 11});
  absl::Status s;
  if (g_size > 1) {  // on one rank a [4,7,11] x is no shard of [5,7,11] either way
    dist::convert(wrong, global, Placement::S(0), Placement::R(), g_comm);
    s = wrong.interpreter()->sync();
    EXPECT_NE(s.message().find("expected f32["), std::string::npos) << s;
  }
  Tensor whole = zeros(g);
  dist::convert(whole, global, Placement::R(), Placement::P(), g_comm);
  s = whole.interpreter()->sync();
  EXPECT_NE(s.message().find("R -> P is not a conversion"), std::string::npos) << s;
  dist::convert(whole, global, Placement::R(), Placement::S(3), g_comm);
  s = whole.interpreter()->sync();
  EXPECT_NE(s.message().find("out of range"), std::string::npos) << s;
  dist::convert(wrong, global, Placement::R(), Placement::S(0), g_comm);  // a slice of a wrong shape
  s = wrong.interpreter()->sync();
  EXPECT_NE(s.message().find("expected f32[5,7,11]"), std::string::npos) << s;
  // The ranks are still in step: a conversion after the errors works.
  Tensor x = from_vector(partition::local_shape(g, Placement::S(1), g_size, g_rank), shard(g, Placement::S(1), g_rank));
  EXPECT_EQ(values(dist::convert(x, global, Placement::S(1), Placement::R(), g_comm)), shard(g, Placement::R(), g_rank));
}

// ---- backward ----

// objective: J = sum over ranks of <c_r, convert(x)_r> for this rank's shard values xv.
float objective(const Shape& g, Placement from, Placement to, const std::vector<float>& xv) {
  const TensorDesc global{g, DType::kF32};
  Tensor y = dist::convert(from_vector(partition::local_shape(g, from, g_size, g_rank), xv), global, from, to, g_comm);
  auto l = sum(mul(y, from_vector(y.shape(), weights(g, to, g_rank)))).item();
  EXPECT_TRUE(l.ok()) << l.status();
  return host_sum(l.ok() ? *l : 0.f);
}

// gradient_mismatches: how many elements of this rank's gradient differ from the adjoint
// (exact: integer data and weights); with `fd`, also checks a few elements of each rank
// against central differences of J (counted as mismatches too, on every rank).
int gradient_mismatches(const Shape& g, Placement from, Placement to, bool fd) {
  const TensorDesc global{g, DType::kF32};
  const Shape xs = partition::local_shape(g, from, g_size, g_rank);
  const std::vector<float> xv = shard(g, from, g_rank);
  Tensor x = from_vector(xs, xv).set_requires_grad(true);
  Tensor y = dist::convert(x, global, from, to, g_comm);
  absl::Status s = sum(mul(y, from_vector(y.shape(), weights(g, to, g_rank)))).backward();
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> grad = x.grad().defined() ? values(x.grad()) : std::vector<float>(xv.size(), 0.f);
  const std::vector<float> want = adjoint(g, from, to, g_rank);
  EXPECT_EQ(grad.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < std::min(grad.size(), want.size()); ++i) bad += grad[i] != want[i];
  if (!fd) return bad;
  const float h = 0.5f;  // J is linear: exact for any step
  for (int r = 0; r < g_size; ++r) {
    const int64_t n = numel(partition::local_shape(g, from, g_size, r));
    for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
      if (n == 0) break;
      std::vector<float> plus = xv, minus = xv;
      if (g_rank == r) {
        plus[i] += h;
        minus[i] -= h;
      }
      const double d = (objective(g, from, to, plus) - objective(g, from, to, minus)) / (2.0 * h);
      const float gr = host_bcast(g_rank == r ? grad[i] : 0.f, r);
      if (std::fabs(gr - d) > 1e-3 * (1 + std::fabs(d))) {
        ++bad;
        ADD_FAILURE() << "rank " << r << " element " << i << ": gradient " << gr << ", central difference " << d;
      }
    }
  }
  return bad;
}

// In normal runs every gradient is right. Under MTC_TESTING_BREAK_CONVERT_BACKWARD=<step>
// (the convert_mpitest_broken ctests) the gradients of that step, and only those, must be
// found wrong on some rank: the check detects a broken rule.
TEST(ConvertBackward, MatchesTheAdjointAndFiniteDifferences) {
  const Step broken = dist::break_convert_backward();
  if (broken != Step::kNone && g_size == 1) GTEST_SKIP() << "one rank: nothing to reduce, nothing to break";
  int checked_broken = 0;
  for (const Shape& g : kShapes) {
    for (auto [from, to] : conversions(static_cast<int>(g.size()))) {
      SCOPED_TRACE(name(g, from, to));
      const Step step = partition::plan_conversion(from, to).step;
      // Central differences on the 3-D shape (every step and dimension); the adjoint everywhere.
      const bool fd = broken == Step::kNone && g.size() == 3;
      const float bad = host_sum(static_cast<float>(gradient_mismatches(g, from, to, fd)));
      if (step == broken) {
        ++checked_broken;
        EXPECT_GT(bad, 0) << "the broken " << partition::step_name(step) << " backward went unnoticed";
      } else {
        EXPECT_EQ(bad, 0);
      }
    }
  }
  if (broken != Step::kNone) {
    EXPECT_GT(checked_broken, 0);
  }
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  return mtc::testing_main::run(argc, argv, "convert_mpitest", /*check_arguments=*/true, size_t{128} << 20, mtc::g_comm, mtc::g_rank,
                                mtc::g_size);
}
