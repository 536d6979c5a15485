// DTP's mesh (include/mtc/dtp.h, Mesh, make_mesh, GradReducer over a mesh; docs/dtp.md,
// "Mesh"). Run under mpirun with 1 to 4 ranks (tests/dist_tests.cmake); every rank runs
// every test, for every group size t that divides the ranks.
//  - the mesh's groups are contiguous ranks and `across` joins the same index of each;
//  - a small MLP (a Megatron pair, and every mode for the whole of it) trained on a
//    global batch whose groups each take their own rows gives the outputs and every
//    parameter gradient of the same layers on one rank over the whole batch;
//  - a group size that does not divide the ranks is an error naming it;
//  - GradReducer::refresh keeps the buckets when nothing changed and makes them again
//    (clearing the old hooks) when the parameters' placements did.

#include <cmath>
#include <cstdio>

#include "comm/communicator.h"
#include "dist/dtp.h"
#include "gtest/gtest.h"
#include "mpitest_main.h"
#include "mpitest_values.h"
#include "mtc/distributed.h"
#include "mtc/dtp.h"
#include "mtc/interpreter.h"
#include "mtc/nn.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"

namespace mtc {
namespace {

using testing_values::values;
using testing_values::ramp;
using testing_values::expect_near;

dist::CommPtr g_comm;
int g_rank = 0, g_size = 1;




// divisors: the group sizes this world can take.
std::vector<int> divisors() {
  std::vector<int> d;
  for (int t = 1; t <= g_size; ++t) {
    if (g_size % t == 0) d.push_back(t);
  }
  return d;
}

dtp::Mesh mesh_of(int t) {
  auto m = dtp::make_mesh(g_comm, t);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : dtp::Mesh{};
}

class TwoLinear final : public nn::Module {
 public:
  TwoLinear(int64_t d, int64_t h) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(d, h));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(h, d));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x))); }
  std::string type_name() const override { return "TwoLinear"; }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// Problem: a global batch of `rows` rows (a multiple of the groups), its loss weights,
// and one rank's outputs and gradients on the whole of it, with the loss the batch mean
// of sum(y * c) per row, as a training loss divides by the batch.
struct Problem {
  int64_t rows = 0, d = 0;
  std::vector<float> x, c;
  std::vector<float> y_ref;
  std::vector<std::vector<float>> grads_ref;
};

Problem reference(TwoLinear& net, int64_t rows, int64_t d) {
  Problem p;
  p.rows = rows;
  p.d = d;
  p.x = ramp(rows * d, 0.1f, 0.05f);
  p.c = ramp(rows * d, 0.02f, 0.01f);
  TensorList params;
  for (const Tensor& w : net.parameters()) {
    Tensor r = from_vector(w.shape(), values(w));
    r.set_requires_grad(true);
    params.push_back(r);
  }
  Tensor x = from_vector({rows, d}, p.x), c = from_vector({rows, d}, p.c);
  Tensor y = linear(relu(linear(x, params[0], params[1])), params[2], params[3]);
  EXPECT_TRUE(scale(sum(mul(y, c)), 1.f / static_cast<float>(rows)).backward().ok());
  p.y_ref = values(y);
  for (const Tensor& w : params) p.grads_ref.push_back(values(w.grad()));
  return p;
}

// rows_of: the block of `from` (rows of d values) that rows [r.offset, r.offset + r.size) are.
std::vector<float> rows_of(const std::vector<float>& from, partition::Range r, int64_t d) {
  return std::vector<float>(from.begin() + r.offset * d, from.begin() + (r.offset + r.size) * d);
}

// run_on_mesh: net (sharded over m.group already, reducer made) runs group g's rows of the
// problem, split S(0) within the group; the group's loss is the mean over its rows. Its
// output must be the reference's rows of the group, and after the reducer every
// parameter gradient the reference's (the mean over the groups of each group's gradient
// is the gradient of the whole batch's mean).
void run_on_mesh(TwoLinear& net, dtp::GradReducer& reducer, const dtp::Mesh& m, const Problem& p) {
  const int64_t group_rows = p.rows / m.groups;
  const partition::Range mine{m.group_index * group_rows, group_rows};
  const partition::Range shard = partition::shard_range(group_rows, m.group->parts, m.group->index);
  const partition::Range local{mine.offset + shard.offset, shard.size};
  Tensor x = dtp::distribute(from_vector({local.size, p.d}, rows_of(p.x, local, p.d)), {group_rows, p.d},
                             dtp::Placement::S(0), m.group);
  Tensor c = dtp::distribute(from_vector({local.size, p.d}, rows_of(p.c, local, p.d)), {group_rows, p.d},
                             dtp::Placement::S(0), m.group);
  Tensor y = net.forward(x);
  EXPECT_TRUE(y.global());
  EXPECT_EQ(y.shape(), (Shape{group_rows, p.d}));
  ASSERT_TRUE(scale(sum(mul(y, c)), 1.f / static_cast<float>(group_rows)).backward().ok());
  reducer.finish();
  expect_near(values(y), rows_of(p.y_ref, mine, p.d), "output");
  const TensorList params = net.parameters();
  ASSERT_EQ(params.size(), p.grads_ref.size());
  for (size_t i = 0; i < params.size(); ++i) {
    expect_near(values(params[i].grad()), p.grads_ref[i], "gradient of parameter " + std::to_string(i));
  }
}

// check_mesh: net (pinned as the test wants) sharded for `mode` over groups of t, with
// the reducer over the mesh, against one rank on the whole batch.
void check_mesh(TwoLinear& net, dtp::Mode mode, int t, int64_t d) {
  const dtp::Mesh m = mesh_of(t);
  ASSERT_NE(m.group, nullptr);
  // 2t + 1 rows per group: uneven shards within a group of 2 or 4.
  const Problem p = reference(net, m.groups * (2 * t + 1), d);
  auto figures = dtp::shard(net, mode, m.group);
  ASSERT_TRUE(figures.ok()) << figures.status();
  auto reducer = dtp::GradReducer::create(net, m, size_t{1} << 20);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  run_on_mesh(net, **reducer, m, p);
}

TEST(DtpMesh, GroupsAreContiguousAndAcrossJoinsTheSameIndex) {
  for (int t : divisors()) {
    SCOPED_TRACE("t=" + std::to_string(t));
    const dtp::Mesh m = mesh_of(t);
    ASSERT_NE(m.group, nullptr);
    EXPECT_EQ(m.groups, g_size / t);
    EXPECT_EQ(m.group_index, g_rank / t);
    EXPECT_EQ(dtp::group_size(m.group), t);
    EXPECT_EQ(dtp::group_rank(m.group), g_rank % t);
    EXPECT_EQ(m.across->world_size(), m.groups);
    EXPECT_EQ(m.across->rank(), m.group_index);
    // Who is in each: the world ranks, gathered over the group and across.
    const int32_t me = g_rank;
    std::vector<int32_t> in_group(t), across(m.groups);
    EXPECT_TRUE(m.group->comm->all_gather(&me, in_group.data(), 1, comm::DataType::kI32)->wait().ok());
    EXPECT_TRUE(m.across->all_gather(&me, across.data(), 1, comm::DataType::kI32)->wait().ok());
    for (int i = 0; i < t; ++i) EXPECT_EQ(in_group[i], m.group_index * t + i);
    for (int g = 0; g < m.groups; ++g) EXPECT_EQ(across[g], g * t + g_rank % t);
  }
}

TEST(DtpMesh, MegatronPairEqualsOneRankOnTheWholeBatch) {
  for (int t : divisors()) {
    SCOPED_TRACE("t=" + std::to_string(t));
    TwoLinear net(8, 16);
    ASSERT_TRUE(dtp::pin(*net.fc1, dtp::Mode::kP4).ok());  // column split
    ASSERT_TRUE(dtp::pin(*net.fc2, dtp::Mode::kP3).ok());  // row split
    check_mesh(net, dtp::Mode::kP1, t, 8);
  }
}

TEST(DtpMesh, EveryModeEqualsOneRankOnTheWholeBatch) {
  for (int t : divisors()) {
    for (dtp::Mode mode : {dtp::Mode::kP1, dtp::Mode::kP2, dtp::Mode::kP3, dtp::Mode::kP4}) {
      SCOPED_TRACE("t=" + std::to_string(t) + " " + partition::mode_name(mode));
      TwoLinear net(8, 12);
      check_mesh(net, mode, t, 8);
    }
  }
}

TEST(DtpMesh, AGroupSizeThatDoesNotDivideTheRanksIsAnError) {
  for (int t : {0, -2, g_size + 1}) {
    auto m = dtp::make_mesh(g_comm, t);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    std::string divs;
    for (int d : divisors()) divs += (divs.empty() ? "" : ", ") + std::to_string(d);
    EXPECT_EQ(m.status().message(), "--dtp_group=" + std::to_string(t) + ": expected a divisor of the " +
                                        std::to_string(g_size) + (g_size == 1 ? " rank" : " ranks") + " (" + divs +
                                        ")");
  }
  if (g_size == 4) {
    auto m = dtp::make_mesh(g_comm, 3);
    EXPECT_EQ(m.status().message(), "--dtp_group=3: expected a divisor of the 4 ranks (1, 2, 4)");
  }
  auto none = dtp::make_mesh(nullptr, 1);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
}

// refresh: nothing changed, nothing made again; a model placed otherwise (the reducer
// pointed at another model of the same layers, placed p1 where the first was p4/p3)
// gets new buckets, the first model's hooks are cleared, the gradients are right, and the
// reducer's figures count both buckets' reductions.
TEST(DtpMesh, RefreshRebuildsOnlyWhenPlacementsChange) {
  const int t = g_size % 2 == 0 ? 2 : 1;
  const dtp::Mesh m = mesh_of(t);
  ASSERT_NE(m.group, nullptr);
  TwoLinear pair(8, 16), plain(8, 16);
  ASSERT_TRUE(dtp::pin(*pair.fc1, dtp::Mode::kP4).ok());
  ASSERT_TRUE(dtp::pin(*pair.fc2, dtp::Mode::kP3).ok());
  const Problem p_pair = reference(pair, m.groups * 5, 8), p = reference(plain, m.groups * 5, 8);
  ASSERT_TRUE(dtp::shard(pair, dtp::Mode::kP1, m.group).ok());
  ASSERT_TRUE(dtp::shard(plain, dtp::Mode::kP1, m.group).ok());
  auto made = dtp::GradReducer::create(pair, m, size_t{1} << 20);
  ASSERT_TRUE(made.ok()) << made.status();
  dtp::GradReducer& reducer = **made;
  if (t > 1) {  // fc1's weight and bias split on outputs, fc2's weight on inputs; fc2's bias R
    EXPECT_EQ(reducer.replicated_parameters(), 1);
    EXPECT_EQ(reducer.sharded_parameters(), m.groups > 1 ? 3 : 0);
  }
  dist::DataParallel* before = reducer.data_parallel();
  ASSERT_TRUE(reducer.refresh(pair).ok());
  EXPECT_EQ(reducer.rebuilds(), 0);
  EXPECT_EQ(reducer.data_parallel(), before);
  run_on_mesh(pair, reducer, m, p_pair);
  auto first = reducer.figures();
  ASSERT_TRUE(first.ok()) << first.status();
  if (g_size > 1) {
    EXPECT_GT(first->reduced_bytes, 0u) << "fc2's bias is replicated";
  }

  ASSERT_TRUE(reducer.refresh(plain).ok());
  EXPECT_EQ(reducer.rebuilds(), 1);
  EXPECT_EQ(reducer.replicated_parameters(), 4);
  EXPECT_EQ(reducer.sharded_parameters(), 0);
  for (const Tensor& w : pair.parameters()) EXPECT_FALSE(w.meta()->grad_ready) << "a hook of the old buckets";
  for (const Tensor& w : plain.parameters()) EXPECT_TRUE(w.meta()->grad_ready || g_size == 1);
  run_on_mesh(plain, reducer, m, p);
  ASSERT_TRUE(reducer.refresh(plain).ok());
  EXPECT_EQ(reducer.rebuilds(), 1);
  // The figures outlive the buckets refresh() replaced: the first model's reductions and
  // the second's. (Until 2026-11-29 they restarted with the new buckets, and mtc-train's
  // dp_reduced_bytes, the end's less the warm-up's, wrapped after auto moved a parameter.)
  auto both = reducer.figures();
  ASSERT_TRUE(both.ok()) << both.status();
  uint64_t now = 0, calls = 0;
  if (dist::DataParallel* dp = reducer.data_parallel()) {
    auto own = dp->figures();
    ASSERT_TRUE(own.ok()) << own.status();
    now = own->reduced_bytes, calls = own->reductions;
  }
  EXPECT_EQ(both->reduced_bytes, first->reduced_bytes + now);
  EXPECT_EQ(both->reductions, first->reductions + calls);
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  return mtc::testing_main::run(argc, argv, "dtp_mesh_mpitest", /*check_arguments=*/false, size_t{256} << 20,
                                mtc::g_comm, mtc::g_rank, mtc::g_size);
}
