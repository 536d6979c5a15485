// DTP's run-time choice (--dtp=auto: src/dist/dtp_auto.h, dtp::enable_auto) across ranks.
// Run under mpirun with 1, 2, 3 and 4 ranks (tests/dist_tests.cmake); every rank runs
// every test.
//  - a small MLP whose every op's mode the planner chooses gives the outputs and the
//    parameter gradients of one rank, and every parameter is settled by its first op;
//  - the second forward makes no decision: every op is a cache hit;
//  - a move carries the tensor's optimizer state, given the tensor's own group;
//  - the budget binds: with too little room for the weights whole the planner shards
//    them, with none at all the error names the op and the budget; a cap on the stored
//    state's share of it shards them too, and never stops an op that adds no state; a
//    decision that places a weight is made again for the next weight held alike, and the
//    report's summary gives such decisions one line;
//  - a weight settled sharded by the first decisions (at default rates that make its
//    optimizer step dear) moves whole after the fit, its optimizer step notwithstanding;
//  - without eviction (count_activations), after the fit a decision adds only what the
//    warm-up's measured peak leaves: with the region's room the move above happens, with
//    none the weight stays where the warm-up put it;
//  - under comm_check, ranks whose planners decide differently (a fault injected on
//    purpose, MTC_TESTING_DTP_DISAGREE) stop with an error naming the op; without it the
//    same ranks agree.

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "comm/communicator.h"
#include "dist/dtp.h"
#include "gtest/gtest.h"
#include "mpitest_main.h"
#include "mpitest_values.h"
#include "mtc/distributed.h"
#include "mtc/dtp.h"
#include "mtc/interpreter.h"
#include "mtc/nn.h"
#include "mtc/optim.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"

namespace mtc {
namespace {

using testing_values::values;
using testing_values::ramp;
using testing_values::expect_near;

dist::CommPtr g_comm;
int g_rank = 0, g_size = 1;



class Mlp final : public nn::Module {
 public:
  Mlp(int64_t d, int64_t h) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(d, h));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(h, d));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x))); }
  std::string type_name() const override { return "Mlp"; }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

dtp::AutoOptions options() {
  dtp::AutoOptions o;
  o.comm = partition::CollectiveModel::mpi_cpu_default();
  return o;
}

// input: the rows of x [rows, d] this rank holds under S(0), as a global tensor.
Tensor input(const std::vector<float>& xv, int64_t rows, int64_t d, const dtp::Group& g) {
  Tensor x = from_vector({rows, d}, xv);
  const partition::Range r = partition::shard_range(rows, g_size, g_rank);
  return dtp::distribute(slice(x, 0, r.offset, r.offset + r.size), {rows, d}, dtp::Placement::S(0), g);
}

TEST(DtpAuto, EqualsOneRankAndSettlesEveryParameter) {
  const int64_t rows = 7, d = 8, h = 12;  // 7 rows: uneven shards
  Mlp net(d, h);
  TensorList ref;
  for (const Tensor& p : net.parameters()) {
    Tensor r = from_vector(p.shape(), values(p));
    r.set_requires_grad(true);
    ref.push_back(r);
  }
  const std::vector<float> xv = ramp(rows * d, 0.1f, 0.05f), cv = ramp(rows * d, 0.02f, 0.01f);
  Tensor c = from_vector({rows, d}, cv);
  Tensor y_ref = linear(relu(linear(from_vector({rows, d}, xv), ref[0], ref[1])), ref[2], ref[3]);
  ASSERT_TRUE(sum(mul(y_ref, c)).backward().ok());

  const dtp::Group g = dtp::make_group(g_comm, /*check=*/true);
  ASSERT_TRUE(dtp::enable_auto(net, g, options()).ok());
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.ref()->dist->unsettled);
  Tensor y = net.forward(input(xv, rows, d, g));
  for (const Tensor& p : net.parameters()) EXPECT_FALSE(p.ref()->dist->unsettled) << p.desc().str();
  // The reducer is made once the forward placed the parameters, as mtc-train does.
  auto reducer = dtp::GradReducer::create(net, g, size_t{1} << 20);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  ASSERT_TRUE(sum(mul(y, c)).backward().ok());
  (*reducer)->finish();
  const std::vector<float> got = values(y), want = values(y_ref);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << i;
  const TensorList params = net.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> gg = values(params[i].grad()), gw = values(ref[i].grad());
    ASSERT_EQ(gg.size(), gw.size());
    for (size_t k = 0; k < gg.size(); ++k) ASSERT_NEAR(gg[k], gw[k], 1e-5f * (1 + std::fabs(gw[k]))) << i << " " << k;
  }
  EXPECT_EQ(dtp::auto_figures(g).settled, params.size());
}

TEST(DtpAuto, TheSecondForwardIsAllCacheHits) {
  Mlp net(8, 12);
  const dtp::Group g = dtp::make_group(g_comm);
  ASSERT_TRUE(dtp::enable_auto(net, g, options()).ok());
  const std::vector<float> xv = ramp(8 * 8, 0.1f, 0.0f);
  ASSERT_TRUE(values(net.forward(input(xv, 8, 8, g))).size() == 64u);
  const dtp::AutoFigures first = dtp::auto_figures(g);
  EXPECT_GT(first.decisions, 0u);
  ASSERT_TRUE(values(net.forward(input(xv, 8, 8, g))).size() == 64u);
  const dtp::AutoFigures second = dtp::auto_figures(g);
  EXPECT_EQ(second.decisions, first.decisions);
  EXPECT_GE(second.hits, first.hits + 3);  // linear, relu, linear at least
  EXPECT_EQ(second.moves, 0u);
}

// A move as the planner makes it: restore() is given the tensor's own group (a member of
// the DistInfo that restore replaces), and the tensor's follower (its optimizer state,
// made by zeros_like) moves with it. Until 2026-11-27 the follower's move read the group
// through the freed DistInfo and crashed: every move after the warm-up's fit of a
// parameter with AdamW state did.
TEST(DtpAuto, AMoveCarriesTheFollowersGivenTheTensorsOwnGroup) {
  const dtp::Group g = dtp::make_group(g_comm);
  const int64_t rows = 8, cols = 6;
  const std::vector<float> wv = ramp(rows * cols, 0.1f, 0.01f);
  Tensor w = from_vector({rows, cols}, wv);
  ASSERT_TRUE(dtp::restore(w, dtp::Placement::S(0), /*gather=*/false, /*unsettled=*/false, g).ok());
  Tensor state = dtp::zeros_like(w, /*persistent=*/true);
  ASSERT_TRUE(dtp::restore(w, dtp::Placement::S(1), false, false, w.ref()->dist->group).ok());
  EXPECT_TRUE(dtp::placement(w) == dtp::Placement::S(1));
  EXPECT_TRUE(dtp::placement(state) == dtp::Placement::S(1));
  const partition::Range r = partition::shard_range(cols, g_size, g_rank);
  std::vector<float> want;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = r.offset; j < r.offset + r.size; ++j) want.push_back(wv[static_cast<size_t>(i * cols + j)]);
  }
  expect_near(values(dtp::local(w)), want, "w's shard after the move");
  EXPECT_EQ(values(dtp::local(state)), std::vector<float>(want.size(), 0.f));
}

TEST(DtpAuto, TheBudgetBinds) {
  if (g_size == 1) GTEST_SKIP() << "one rank: every placement is the whole tensor";
  const int64_t d = 64, h = 256;
  const std::vector<float> xv = ramp(8 * d, 0.1f, 0.0f);
  // Loose: no limit. Tight: room for both weights' shards with their gradients and two
  // AdamW states (64 * 256 * 4 bytes * 4 = 256 KiB whole, 256 KiB / p a shard) and 64 KiB
  // for the rest, less than fc1's weight whole beside fc2's shard (256 KiB + 256 KiB / p).
  const double tight = 2 * 256.0 * 1024 / g_size + 64 * 1024;
  size_t loose_local = 0;
  for (double budget : {0.0, tight}) {
    Mlp net(d, h);
    const dtp::Group g = dtp::make_group(g_comm);
    dtp::AutoOptions o = options();
    o.optimizer_states = 2;
    o.budget_bytes = budget;
    ASSERT_TRUE(dtp::enable_auto(net, g, o).ok());
    ASSERT_EQ(values(net.forward(input(xv, 8, d, g))).size(), static_cast<size_t>(8 * d));
    const size_t local = dtp::local(net.fc1->weight).desc().bytes();
    if (budget == 0) {
      loose_local = local;
    } else {
      EXPECT_LT(local, net.fc1->weight.desc().bytes()) << "a tight budget keeps fc1's weight whole";
      EXPECT_LE(local, loose_local);
    }
  }
  // No room at all: the error names the op and the budget.
  Mlp net(d, h);
  const dtp::Group g = dtp::make_group(g_comm);
  dtp::AutoOptions o = options();
  o.budget_bytes = 1024;
  ASSERT_TRUE(dtp::enable_auto(net, g, o).ok());
  auto v = net.forward(input(xv, 8, d, g)).to_vector();
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("no mode fits the room"), std::string::npos) << v.status();
  EXPECT_NE(v.status().message().find("linear"), std::string::npos) << v.status();
}

TEST(DtpAuto, TheCommRegionHoldsOnlyGradients) {
  // The same total room, 8 MiB and 16 KiB: in one pool every option of the MLP fits; when
  // the 8 MiB are the comm region, which only gradients use, no option's parameters, states
  // and activations fit the 16 KiB outside it, and the error says so.
  const int64_t d = 64, h = 256;
  const std::vector<float> xv = ramp(8 * d, 0.1f, 0.0f);
  const double grads = 8.0 * 1024 * 1024, outside = 16 * 1024;
  for (double grad_region : {0.0, grads}) {
    Mlp net(d, h);
    const dtp::Group g = dtp::make_group(g_comm);
    dtp::AutoOptions o = options();
    o.optimizer_states = 2;
    o.budget_bytes = grads + outside;
    o.grad_region_bytes = grad_region;
    ASSERT_TRUE(dtp::enable_auto(net, g, o).ok());
    auto v = net.forward(input(xv, 8, d, g)).to_vector();
    if (grad_region == 0) {
      EXPECT_TRUE(v.ok()) << v.status();
    } else {
      ASSERT_FALSE(v.ok()) << "the parameters were placed in the comm region's room";
      EXPECT_NE(v.status().message().find("of it outside the comm region"), std::string::npos) << v.status();
      EXPECT_NE(v.status().message().find("op linear"), std::string::npos) << v.status();
    }
  }
}

TEST(DtpAuto, TheStoredStateKeepsToItsShareOfTheBudget) {
  if (g_size == 1) GTEST_SKIP() << "one rank: every placement is the whole tensor";
  // A room of 64 MiB fits every option, but the stored state may take only room for the
  // two weights' shards with two AdamW states (outside the comm region: the weight and its
  // states, 3 x 64 KiB whole, 3 x 64 KiB / p a shard) and 16 KiB for the biases: fc1's
  // weight cannot stay whole beside fc2's shard.
  const int64_t d = 64, h = 256;
  const std::vector<float> xv = ramp(8 * d, 0.1f, 0.0f);
  const double weight_state = 3.0 * d * h * 4;
  {
    Mlp net(d, h);
    const dtp::Group g = dtp::make_group(g_comm);
    dtp::AutoOptions o = options();
    o.optimizer_states = 2;
    o.budget_bytes = 64.0 * 1024 * 1024;
    o.state_bytes = 2 * weight_state / g_size + 16 * 1024;
    ASSERT_TRUE(dtp::enable_auto(net, g, o).ok());
    ASSERT_EQ(values(net.forward(input(xv, 8, d, g))).size(), static_cast<size_t>(8 * d));
    EXPECT_LT(dtp::local(net.fc1->weight).desc().bytes(), net.fc1->weight.desc().bytes())
        << "fc1's weight kept whole beyond the state's share";
    EXPECT_LT(dtp::local(net.fc2->weight).desc().bytes(), net.fc2->weight.desc().bytes());
  }
  // A share too small for anything: the cap is a policy, not the memory, so the options
  // that keep no more state than their inputs hold (the weights' initial shards) still
  // pass it; the MLP trains, and no weight grows whole.
  Mlp net(d, h);
  const dtp::Group g = dtp::make_group(g_comm);
  dtp::AutoOptions o = options();
  o.optimizer_states = 2;
  o.budget_bytes = 64.0 * 1024 * 1024;
  o.state_bytes = 1024;
  ASSERT_TRUE(dtp::enable_auto(net, g, o).ok());
  auto v = net.forward(input(xv, 8, d, g)).to_vector();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_LT(dtp::local(net.fc1->weight).desc().bytes(), net.fc1->weight.desc().bytes());
  EXPECT_LT(dtp::local(net.fc2->weight).desc().bytes(), net.fc2->weight.desc().bytes());
}

// Two layers of one shape on one input (as a transformer's q, k and v projections): their
// weights are held alike, so the second's decision has the first's key. A decision that
// places a weight is not reused for the other: until 2026-11-27 it was, and the hit placed
// the second weight whole past the room.
class Twin final : public nn::Module {
 public:
  explicit Twin(int64_t d) {
    a = register_module("a", std::make_shared<nn::Linear>(d, d));
    b = register_module("b", std::make_shared<nn::Linear>(d, d));
  }
  Tensor forward(const Tensor& x) override { return add((*a)(x), (*b)(x)); }
  std::string type_name() const override { return "Twin"; }
  std::shared_ptr<nn::Linear> a, b;
};

TEST(DtpAuto, ADecisionThatPlacesIsMadeAgainForTheNextTensorHeldAlike) {
  if (g_size == 1) GTEST_SKIP() << "one rank: every placement is the whole tensor";
  const int64_t d = 128;
  const int64_t rows = 1024;  // a batch large enough that moving activations costs more than the weights
  const std::vector<float> xv = ramp(rows * d, 0.1f, 0.0f);
  const double whole = 3.0 * d * d * 4, shard = whole / g_size;  // a weight and two AdamW states
  auto whole_weights = [&](double state_bytes) {
    Twin net(d);
    const dtp::Group g = dtp::make_group(g_comm);
    dtp::AutoOptions o = options();
    o.optimizer_states = 2;
    o.lambda = 0;
    o.budget_bytes = 64.0 * 1024 * 1024;
    o.state_bytes = state_bytes;
    EXPECT_TRUE(dtp::enable_auto(net, g, o).ok());
    EXPECT_EQ(values(net.forward(input(xv, rows, d, g))).size(), static_cast<size_t>(rows * d));
    int n = 0;
    for (const Tensor& w : {net.a->weight, net.b->weight}) n += dtp::local(w).desc().bytes() == w.desc().bytes();
    return n;
  };
  // Unbounded, the fastest option keeps both weights whole (else this test shows nothing).
  ASSERT_EQ(whole_weights(0), 2);
  // Room for one weight whole beside the other's shard (and the biases): one, not two.
  EXPECT_EQ(whole_weights(whole + shard + 8 * 1024), 1);
}

// Each weight of the Twin is placed by a decision of its own, and both decisions are alike
// (the same op on the same global inputs, taking the same signature): the report's summary
// gives them one line, with the calls of both.
TEST(DtpAuto, TheSummaryGivesDecisionsAlikeOneLine) {
  if (g_size == 1) GTEST_SKIP() << "one rank: every placement is the whole tensor";
  const int64_t d = 64, rows = 64;
  const std::vector<float> xv = ramp(rows * d, 0.1f, 0.0f);
  Twin net(d);
  const dtp::Group g = dtp::make_group(g_comm);
  dtp::AutoOptions o = options();
  o.report = true;
  std::FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  o.report_to = sink;
  ASSERT_TRUE(dtp::enable_auto(net, g, o).ok());
  for (int it = 0; it < 2; ++it) {  // the second iteration's calls are measured
    EXPECT_EQ(values(net.forward(input(xv, rows, d, g))).size(), static_cast<size_t>(rows * d));
    ASSERT_TRUE(dtp::end_iteration(g).ok());
  }
  std::fclose(sink);
  const std::string summary = dtp::auto_summary(g);
  size_t decisions = 0, lines = 0;
  ASSERT_EQ(std::sscanf(summary.c_str(), "dtp summary: %zu decisions (%zu lines)", &decisions, &lines), 2) << summary;
  EXPECT_LT(lines, decisions) << summary;
  int linear_lines = 0;
  uint64_t linear_calls = 0;
  for (absl::string_view line : absl::StrSplit(summary, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 4 || f[3] != "linear") continue;
    ++linear_lines;
    // dtp summary: ROW linear SIGNATURE... PRED MEAS CALLS  INPUTS: CALLS is the last number
    // before the inputs, which begin with the activation's "f32[".
    for (size_t i = 4; i + 1 < f.size(); ++i) {
      if (absl::StartsWith(f[i + 1], "f32[")) {
        ASSERT_TRUE(absl::SimpleAtoi(f[i], &linear_calls)) << line;
        break;
      }
    }
  }
  EXPECT_EQ(linear_lines, 1) << summary;
  EXPECT_EQ(linear_calls, 2u) << "the second iteration's two linear calls, on the one line\n" << summary;
}

// MoveAfterFit: the MLP of the test below trained warm-up + 2 iterations under o (λ 0, SGD
// with momentum, default rates that make the optimizer step dear), and what became of
// fc1's weight.
struct MoveAfterFit {
  bool whole_before_fit = true, whole_after = false, momentum_followed = false;
  dtp::AutoFigures figures;
};
void train_mlp_past_the_fit(dtp::AutoOptions o, MoveAfterFit& r) {
  const int64_t rows = 1024, d = 64, h = 256;
  Mlp net(d, h);
  const dtp::Group g = dtp::make_group(g_comm);
  o.lambda = 0;
  o.optimizer_states = 1;
  o.step_family = "sgd_step";
  o.initial_rates = partition::Rates{2e4, 1.0, 0};
  o.grad_bucket_bytes = 2 << 20;
  ASSERT_TRUE(dtp::enable_auto(net, g, o).ok());
  const std::vector<float> xv = ramp(rows * d, 0.1f, 0.01f), cv = ramp(rows * d, 0.02f, 0.01f);
  std::unique_ptr<dtp::GradReducer> reducer;
  std::unique_ptr<optim::Sgd> opt;
  auto whole = [&] { return dtp::local(net.fc1->weight).desc().bytes() == net.fc1->weight.desc().bytes(); };
  for (int it = 0; it < o.warmup_iterations + 2; ++it) {
    if (opt) opt->zero_grad();
    Tensor y = net.forward(input(xv, rows, d, g));
    if (it == o.warmup_iterations - 1) r.whole_before_fit = whole();
    if (!reducer) {
      auto gr = dtp::GradReducer::create(net, g, 2 << 20);
      ASSERT_TRUE(gr.ok()) << gr.status();
      reducer = std::move(*gr);
    } else {
      ASSERT_TRUE(reducer->refresh(net).ok());
    }
    ASSERT_TRUE(sum(mul(y, input(cv, rows, d, g))).backward().ok());
    reducer->finish();
    if (!opt) {
      auto sg = optim::Sgd::create(net.parameters(), {.lr = 0.01f, .momentum = 0.9f});
      ASSERT_TRUE(sg.ok()) << sg.status();
      opt = std::move(*sg);
    }
    opt->step();
    ASSERT_TRUE(dtp::end_iteration(g).ok());
  }
  r.whole_after = whole();
  r.figures = dtp::auto_figures(g);
  r.momentum_followed = dtp::placement(opt->momentum_buffer(0)) == dtp::placement(net.fc1->weight);
}

// The first decisions are made at AutoOptions::initial_rates; here 1 byte/us, so the
// optimizer's step over a whole weight (p1) costs a second and the weights settle S(0),
// gathered per use (the same local matmul, a step over a shard). The fit then finds the
// step's real rate, and keeping a weight whole saves its all-gather and reduce-scatter per
// iteration (the whole gradient goes in a bucket's all-reduce instead): the planner moves
// it to R. The batch (1024 rows) makes every option that converts the activations dearer
// than either, and λ 0 leaves memory out, so the choice is the collectives' alone. The SGD step that writes each weight in
// place is no reader of it: until 2026-11-27 it counted as a second use, which pinned
// every weight with an optimizer where the default rates had put it (moves 0).
TEST(DtpAuto, ASettledWeightMovesAfterTheFitPastItsOptimizerStep) {
  if (g_size == 1) GTEST_SKIP() << "one rank: every placement is the whole tensor";
  MoveAfterFit r;
  train_mlp_past_the_fit(options(), r);
  if (HasFatalFailure()) return;
  ASSERT_FALSE(r.whole_before_fit) << "the default rates kept fc1's weight whole: the test shows nothing";
  EXPECT_TRUE(r.whole_after) << "fc1's weight stayed sharded";
  EXPECT_GT(r.figures.moves, 0u);
  EXPECT_TRUE(r.momentum_followed) << "the momentum moved with its weight";
  EXPECT_LT(r.figures.activation_room_bytes, 0) << "not counted without count_activations";
}

// The iteration's activations (AutoOptions::count_activations, what mtc-train sets without
// eviction): after the fit a decision may add over the warm-up's only what the warm-up's
// measured peak leaves. With the whole compute region (most of the test device's 256 MiB
// against this MLP's few hundred KiB) the move above still happens, and what it adds is
// within the room; with a capacity of one byte (nothing left) the weight stays where the
// warm-up put it.
TEST(DtpAuto, AfterTheFitDecisionsAddOnlyWhatTheWarmUpsPeakLeaves) {
  if (g_size == 1) GTEST_SKIP() << "one rank: every placement is the whole tensor";
  dtp::AutoOptions o = options();
  o.count_activations = true;
  MoveAfterFit roomy;
  train_mlp_past_the_fit(o, roomy);
  if (HasFatalFailure()) return;
  ASSERT_FALSE(roomy.whole_before_fit) << "the default rates kept fc1's weight whole: the test shows nothing";
  EXPECT_TRUE(roomy.whole_after) << "fc1's weight stayed sharded with the whole region's room";
  EXPECT_GT(roomy.figures.activation_room_bytes, 64.0 * 1024 * 1024);
  EXPECT_GT(roomy.figures.activation_added_bytes, 0) << "the move adds the weight's whole state";
  EXPECT_LE(roomy.figures.activation_added_bytes, roomy.figures.activation_room_bytes);

  o.activation_capacity_bytes = 1;
  MoveAfterFit tight;
  train_mlp_past_the_fit(o, tight);
  if (HasFatalFailure()) return;
  ASSERT_FALSE(tight.whole_before_fit);
  EXPECT_FALSE(tight.whole_after) << "fc1's weight moved whole with no room left by the warm-up's peak";
  EXPECT_EQ(tight.figures.activation_room_bytes, 0);
  EXPECT_EQ(tight.figures.activation_added_bytes, 0) << "a move that adds no bytes may still be made";
}

TEST(DtpAuto, RanksDecidingDifferentlyAreCaughtUnderCommCheck) {
  if (g_size == 1) GTEST_SKIP() << "one rank: nothing to disagree with";
  // Testing only: the odd ranks take another option for linear than the even ones (every
  // input of the choice is otherwise the same on every rank, so decisions agree).
  ::setenv("MTC_TESTING_DTP_DISAGREE", "linear", 1);
  Mlp net(64, 256);
  const dtp::Group g = dtp::make_group(g_comm, /*check=*/true);
  ASSERT_TRUE(dtp::enable_auto(net, g, options()).ok());
  ::unsetenv("MTC_TESTING_DTP_DISAGREE");
  auto v = net.forward(input(ramp(8 * 64, 0.1f, 0.0f), 8, 64, g)).to_vector();
  ASSERT_FALSE(v.ok()) << "the ranks' different decisions went unnoticed";
  EXPECT_NE(v.status().message().find("disagree"), std::string::npos) << v.status();
  EXPECT_NE(v.status().message().find("op linear"), std::string::npos) << v.status();
}

TEST(DtpAuto, WithoutTheFaultTheSameRanksAgree) {
  Mlp net(64, 256);
  const dtp::Group g = dtp::make_group(g_comm, /*check=*/true);
  ASSERT_TRUE(dtp::enable_auto(net, g, options()).ok());
  auto v = net.forward(input(ramp(8 * 64, 0.1f, 0.0f), 8, 64, g)).to_vector();
  EXPECT_TRUE(v.ok()) << v.status();
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  return mtc::testing_main::run(argc, argv, "dtp_auto_mpitest", /*check_arguments=*/false, size_t{256} << 20,
                                mtc::g_comm, mtc::g_rank, mtc::g_size);
}
