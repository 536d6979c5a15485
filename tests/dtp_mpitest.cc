// DTP across ranks (src/dist/dtp.h, include/mtc/dtp.h). Run under mpirun with 1, 2, 3 and 4
// ranks (tests/dist_tests.cmake); every rank runs every test.
//  - a Megatron-style pair (Linear pinned p4, then Linear pinned p3) gives the outputs and
//    the parameter gradients of the same layers on one rank;
//  - each mode for the whole of a small MLP, likewise;
//  - a mode a module lacks is an error naming it and its modes; a dimension smaller than
//    the group keeps the module replicated, with the same result;
//  - under --comm_check, ranks holding different placements stop with an error naming the op;
//  - messages name global shapes with their placements.

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

// check_against_one_rank: net (already pinned as the test wants) is sharded for `mode`,
// run on x (rows, d) held as `xp`; its output and every parameter's gradient must equal
// those of the same layers run without DTP on the same values.
void check_against_one_rank(TwoLinear& net, dtp::Mode mode, dtp::Placement xp, int64_t rows, int64_t d,
                            dtp::ShardFigures* figures_out = nullptr) {
  // The reference: the same values, plain tensors, before sharding.
  TensorList ref_params;
  for (const Tensor& p : net.parameters()) {
    Tensor r = from_vector(p.shape(), values(p));
    r.set_requires_grad(true);
    ref_params.push_back(r);
  }
  const std::vector<float> xv = ramp(rows * d, 0.1f, 0.05f), cv = ramp(rows * d, 0.02f, 0.01f);
  Tensor x = from_vector({rows, d}, xv), c = from_vector({rows, d}, cv);
  Tensor y_ref = linear(relu(linear(x, ref_params[0], ref_params[1])), ref_params[2], ref_params[3]);
  ASSERT_TRUE(sum(mul(y_ref, c)).backward().ok());

  const dtp::Group g = dtp::make_group(g_comm);
  auto figures = dtp::shard(net, mode, g);
  ASSERT_TRUE(figures.ok()) << figures.status();
  if (figures_out != nullptr) *figures_out = *figures;
  auto reducer = dtp::GradReducer::create(net, g, size_t{1} << 20);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  // Each rank's part of x for its placement.
  Tensor xg = dtp::distribute(x, {rows, d}, dtp::Placement::R(), g);
  if (xp.split()) {
    const partition::Range r = partition::shard_range(rows, g_size, g_rank);
    xg = dtp::distribute(slice(x, 0, r.offset, r.offset + r.size), {rows, d}, xp, g);
  }
  Tensor y = net.forward(xg);
  EXPECT_TRUE(y.global());
  EXPECT_EQ(y.shape(), (Shape{rows, d}));
  ASSERT_TRUE(sum(mul(y, c)).backward().ok());
  (*reducer)->finish();
  expect_near(values(y), values(y_ref), "output");
  const TensorList params = net.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    expect_near(values(params[i].grad()), values(ref_params[i].grad()), "gradient");
  }
}

TEST(Dtp, MegatronPairEqualsOneRank) {
  TwoLinear net(8, 16);
  ASSERT_TRUE(dtp::pin(*net.fc1, dtp::Mode::kP4).ok());  // column split
  ASSERT_TRUE(dtp::pin(*net.fc2, dtp::Mode::kP3).ok());  // row split: the output is Partial
  check_against_one_rank(net, dtp::Mode::kP1, dtp::Placement::R(), 6, 8);
  if (g_size > 1) {  // the pair's parameters are sharded: half (or less) on each rank
    EXPECT_EQ(dtp::local(net.fc1->weight).dim(0), partition::shard_range(16, g_size, g_rank).size);
    EXPECT_EQ(dtp::local(net.fc2->weight).dim(1), partition::shard_range(16, g_size, g_rank).size);
  }
}

TEST(Dtp, EveryModeEqualsOneRank) {
  for (dtp::Mode m : {dtp::Mode::kP1, dtp::Mode::kP2, dtp::Mode::kP3, dtp::Mode::kP4}) {
    SCOPED_TRACE(partition::mode_name(m));
    TwoLinear net(8, 12);
    check_against_one_rank(net, m, dtp::Placement::S(0), 7, 8);  // 7 rows: uneven shards
  }
}

TEST(Dtp, AModeTheModuleLacksIsAnError) {
  nn::Conv2d dw({.in_channels = 8, .out_channels = 8, .kernel = 3, .padding = 1, .groups = 8});
  const absl::Status s = dtp::pin(dw, dtp::Mode::kP3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Conv2d cannot take mode p3: it has p1, p2, p4"), std::string::npos) << s;
}

TEST(Dtp, ADimensionSmallerThanTheGroupStaysReplicated) {
  if (g_size < 3) GTEST_SKIP() << "needs 3 or more ranks";
  // fc1's 2 output features cannot be split over 3 or more ranks under p4.
  TwoLinear net(4, 2);
  dtp::ShardFigures f;
  check_against_one_rank(net, dtp::Mode::kP4, dtp::Placement::R(), 5, 4, &f);
  EXPECT_EQ(f.modules, 1);  // fc2 (2 inputs, 4 outputs) is split
  EXPECT_EQ(f.kept_replicated, 1);
  ASSERT_EQ(f.notes.size(), 1u);
  EXPECT_NE(f.notes[0].find("fc1 (Linear) stays p1: weight f32[2,4] has fewer than"), std::string::npos) << f.notes[0];
  EXPECT_FALSE(dtp::placement(net.fc1->weight).split());
}

TEST(Dtp, RanksHoldingDifferentPlacementsAreCaughtUnderCommCheck) {
  if (g_size < 2) GTEST_SKIP() << "needs 2 or more ranks";
  ASSERT_TRUE(Runtime::current().interpreter().sync().ok());
  const dtp::Group g = dtp::make_group(g_comm, /*check=*/true);
  const int64_t n = 4 * g_size;
  // Rank 0 says rows, the others columns, of a square tensor: the same bytes everywhere.
  const dtp::Placement p = g_rank == 0 ? dtp::Placement::S(0) : dtp::Placement::S(1);
  const Shape local = partition::local_shape({n, n}, p, g_size, g_rank);
  Tensor x = dtp::distribute(from_vector(local, ramp(numel(local), 1, 0)), {n, n}, p, g);
  Tensor y = relu(x);
  const absl::Status s = Runtime::current().interpreter().sync();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("disagree on the placements of op relu"), std::string::npos) << s;
}

TEST(Dtp, MessagesNameGlobalShapesAndPlacements) {
  EXPECT_EQ(partition::describe(TensorDesc{{64, 768}}, dtp::Placement::S(1)), "f32[64,768] S(1)");
  ASSERT_TRUE(Runtime::current().interpreter().sync().ok());
  const dtp::Group g = dtp::make_group(g_comm);
  const Shape local = partition::local_shape({6, 4}, dtp::Placement::S(0), g_size, g_rank);
  Tensor a = dtp::distribute(from_vector(local, ramp(numel(local), 1, 0)), {6, 4}, dtp::Placement::S(0), g);
  Tensor b = dtp::distribute(from_vector({5, 3}, ramp(15, 1, 0)), {5, 3}, dtp::Placement::R(), g);
  Tensor y = matmul(a, b);  // 4 against 5: a shape error on the global shapes
  const absl::Status s = Runtime::current().interpreter().sync();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("f32[6,4] S(0), f32[5,3] R"), std::string::npos) << s;
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  return mtc::testing_main::run(argc, argv, "dtp_mpitest", /*check_arguments=*/false, size_t{256} << 20, mtc::g_comm, mtc::g_rank,
                                mtc::g_size);
}
