// The collective ops, synchronised batch norm and DataParallel across ranks. Run under
// mpirun with 1, 2, 4 and 8 ranks (tests/dist_tests.cmake); every rank runs every test.
//  - forward: each collective (even and uneven) against a reference every rank computes
//    from the deterministic inputs of all ranks, exactly (the values are small integers);
//  - backward: the gradient of L = sum over ranks of sum(y_r * w_r) against central
//    finite differences of L, perturbing one element of one rank's input at a time;
//  - sync_batch_norm against batch_norm over the gathered global batch, forward,
//    backward and running statistics;
//  - DataParallel's gradients against the mean of the ranks' own gradients, and a
//    parameter no rank reached left out of the all-reduce, with no gradient and no step;
//  - a mixture of experts spread over the ranks with every token routed to expert 0, so
//    that the other ranks' experts receive no rows: no hang, zero gradients there.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>

#include "comm/communicator.h"
#include "gtest/gtest.h"
#include "mpitest_main.h"
#include "mpitest_values.h"
#include "mtc/distributed.h"
#include "mtc/interpreter.h"
#include "mtc/models.h"
#include "mtc/nn.h"
#include "mtc/ops.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"

namespace mtc {
namespace {

using testing_values::values;
using testing_values::ramp;
using testing_values::expect_near;

dist::CommPtr g_comm;
int g_rank = 0, g_size = 1;


// input: rank r's input, element i: small integers, distinct across ranks.
std::vector<float> input(int r, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * 100 + (i * 7 + r * 3) % 97);
  return v;
}

constexpr int64_t kRows = 3, kCols = 5;  // rows per rank block, elements per row

TEST(Collectives, AllReduceMatchesReference) {
  const int64_t n = g_size * kRows * kCols;
  Tensor x = from_vector({g_size * kRows, kCols}, input(g_rank, n));
  const std::vector<float> sum = values(dist::all_reduce(x, dist::Reduce::kSum, g_comm));
  const std::vector<float> avg = values(dist::all_reduce(x, dist::Reduce::kAvg, g_comm));
  const std::vector<float> mx = values(dist::all_reduce(x, dist::Reduce::kMax, g_comm));
  for (int64_t i = 0; i < n; ++i) {
    float s = 0, m = -1e30f;
    for (int r = 0; r < g_size; ++r) {
      s += input(r, n)[i];
      m = std::max(m, input(r, n)[i]);
    }
    ASSERT_EQ(sum[i], s) << i;
    ASSERT_EQ(avg[i], s / g_size) << i;  // g_size is a power of two: exact
    ASSERT_EQ(mx[i], m) << i;
  }
}

TEST(Collectives, IntegerAllReduceAndAllGatherAreExact) {
  std::vector<int32_t> mine(1000);
  for (int i = 0; i < 1000; ++i) mine[i] = (g_rank + 1) * 1000003 + i * 31;
  Tensor x = from_vector_i32({1000}, mine);
  auto sum = dist::all_reduce(x, dist::Reduce::kSum, g_comm).to_vector_i32();
  auto all = dist::all_gather(x, g_comm).to_vector_i32();
  ASSERT_TRUE(sum.ok() && all.ok());
  ASSERT_EQ(all->size(), 1000u * g_size);
  for (int i = 0; i < 1000; ++i) {
    int32_t s = 0;
    for (int r = 0; r < g_size; ++r) {
      const int32_t v = (r + 1) * 1000003 + i * 31;
      s += v;
      ASSERT_EQ((*all)[r * 1000 + i], v);
    }
    ASSERT_EQ((*sum)[i], s);
  }
}

TEST(Collectives, AllGatherReduceScatterAllToAllBroadcast) {
  const int64_t n = kRows * kCols;
  Tensor x = from_vector({kRows, kCols}, input(g_rank, n));
  const std::vector<float> gathered = values(dist::all_gather(x, g_comm));
  ASSERT_EQ(gathered.size(), static_cast<size_t>(g_size * n));
  for (int r = 0; r < g_size; ++r)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gathered[r * n + i], input(r, n)[i]);

  const int64_t big = g_size * n;
  Tensor xb = from_vector({g_size * kRows, kCols}, input(g_rank, big));
  for (dist::Reduce op : {dist::Reduce::kSum, dist::Reduce::kAvg, dist::Reduce::kMax}) {
    const std::vector<float> rs = values(dist::reduce_scatter(xb, op, g_comm));
    ASSERT_EQ(rs.size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      float s = 0, m = -1e30f;
      for (int r = 0; r < g_size; ++r) {
        s += input(r, big)[g_rank * n + i];
        m = std::max(m, input(r, big)[g_rank * n + i]);
      }
      const float want = op == dist::Reduce::kSum ? s : op == dist::Reduce::kAvg ? s / g_size : m;
      ASSERT_EQ(rs[i], want) << "op " << static_cast<int>(op) << " element " << i;
    }
  }

  const std::vector<float> a2a = values(dist::all_to_all(xb, g_comm));
  for (int s = 0; s < g_size; ++s)  // block s came from rank s: its block g_rank
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a2a[s * n + i], input(s, big)[g_rank * n + i]);

  const int root = g_size - 1;
  const std::vector<float> b = values(dist::broadcast(x, root, g_comm));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b[i], input(root, n)[i]);
  Tensor y = from_vector({kRows, kCols}, input(g_rank, n), /*persistent=*/true);
  dist::broadcast_(y, 0, g_comm);
  const std::vector<float> yv = values(y);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(yv[i], input(0, n)[i]);
  ASSERT_TRUE(dist::barrier(*x.interpreter(), g_comm).ok());
}

// rows_from(r, q): rows rank r sends to rank q in the uneven exchange (some zero).
int64_t rows_from(int r, int q) { return (r + 2 * q) % 3; }

TEST(Collectives, UnevenAllToAllMatchesReference) {
  std::vector<int64_t> send(g_size), recv(g_size);
  for (int q = 0; q < g_size; ++q) {
    send[q] = rows_from(g_rank, q);
    recv[q] = rows_from(q, g_rank);
  }
  const int64_t rows = std::accumulate(send.begin(), send.end(), int64_t{0});
  Tensor x = from_vector({rows, kCols}, input(g_rank, rows * kCols));
  const std::vector<float> y = values(dist::all_to_all(x, send, recv, g_comm));
  int64_t at = 0;
  for (int r = 0; r < g_size; ++r) {
    // Rank r's rows for this rank start after those it sends to lower ranks.
    int64_t start = 0;
    for (int q = 0; q < g_rank; ++q) start += rows_from(r, q);
    int64_t r_rows = 0;
    for (int q = 0; q < g_size; ++q) r_rows += rows_from(r, q);
    const std::vector<float> xr = input(r, r_rows * kCols);
    for (int64_t i = 0; i < rows_from(r, g_rank) * kCols; ++i) ASSERT_EQ(y[at++], xr[start * kCols + i]);
  }
  ASSERT_EQ(at, static_cast<int64_t>(y.size()));
}

TEST(Collectives, BadArgumentsAreErrorsNamingWhatWasExpected) {
  Tensor x = from_vector({g_size * 2 + 1, 2}, std::vector<float>((g_size * 2 + 1) * 2, 1.f));
  if (g_size > 1) {
    Tensor y = dist::reduce_scatter(x, dist::Reduce::kSum, g_comm);
    absl::Status s = x.interpreter()->sync();
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("divisible by the"), std::string::npos) << s;
  }
  Tensor z = dist::all_to_all(x, {1}, {1, 2, 3}, g_comm);
  absl::Status s = x.interpreter()->sync();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expected one per rank"), std::string::npos) << s;
  Tensor b = dist::broadcast(x, g_size, g_comm);
  s = x.interpreter()->sync();
  EXPECT_NE(s.message().find("expected a rank in [0,"), std::string::npos) << s;
}

// ---- backward: finite differences of the global loss ----

// global_loss: sum over ranks of sum(f(x) * w) on each rank.
double global_loss(const std::function<Tensor(const Tensor&)>& f, const std::vector<float>& xv, const Shape& xs,
                   const std::vector<float>& w, const Shape& ys) {
  Tensor y = f(from_vector(xs, xv));
  auto l = sum(mul(y, from_vector(ys, w))).item();
  EXPECT_TRUE(l.ok()) << l.status();
  double local = l.ok() ? *l : 0, total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

void check_backward(const char* name, const std::function<Tensor(const Tensor&)>& f, const Shape& xs,
                    bool distinct) {
  SCOPED_TRACE(name);
  std::mt19937 gen(1234 + g_rank);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t n = numel(xs);
  std::vector<float> xv(n);
  for (int64_t i = 0; i < n; ++i) {
    // distinct: values 0.25 apart over all ranks, so a max has no ties within the step.
    xv[i] = distinct ? 0.25f * static_cast<float>((i * g_size + g_rank) * 37 % (n * g_size)) : u(gen);
  }
  Tensor x = from_vector(xs, xv).set_requires_grad(true);
  Tensor y = f(x);
  const Shape ys = y.shape();
  std::vector<float> w(numel(ys));
  for (float& v : w) v = u(gen);
  ASSERT_TRUE(sum(mul(y, from_vector(ys, w))).backward().ok());
  const std::vector<float> grad = values(x.grad());
  ASSERT_EQ(grad.size(), static_cast<size_t>(n));

  const float h = 1e-2f;
  for (int s = 0; s < g_size; ++s) {
    for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
      std::vector<float> plus = xv, minus = xv;
      if (g_rank == s) {
        plus[i] += h;
        minus[i] -= h;
      }
      const double fd = (global_loss(f, plus, xs, w, ys) - global_loss(f, minus, xs, w, ys)) / (2 * h);
      float g = grad[i];
      MPI_Bcast(&g, 1, MPI_FLOAT, s, MPI_COMM_WORLD);
      EXPECT_NEAR(g, fd, 2e-3 + 2e-3 * std::fabs(fd)) << "rank " << s << " element " << i;
    }
  }
}

TEST(CollectiveBackward, MatchesFiniteDifferences) {
  const Shape xs{g_size * 2, 3};
  using dist::Reduce;
  check_backward("all_reduce sum", [](const Tensor& x) { return dist::all_reduce(x, Reduce::kSum, g_comm); }, xs, false);
  check_backward("all_reduce avg", [](const Tensor& x) { return dist::all_reduce(x, Reduce::kAvg, g_comm); }, xs, false);
  check_backward("all_reduce max", [](const Tensor& x) { return dist::all_reduce(x, Reduce::kMax, g_comm); }, xs, true);
  check_backward("all_gather", [](const Tensor& x) { return dist::all_gather(x, g_comm); }, xs, false);
  check_backward("reduce_scatter sum", [](const Tensor& x) { return dist::reduce_scatter(x, Reduce::kSum, g_comm); },
                 xs, false);
  check_backward("reduce_scatter avg", [](const Tensor& x) { return dist::reduce_scatter(x, Reduce::kAvg, g_comm); },
                 xs, false);
  check_backward("reduce_scatter max", [](const Tensor& x) { return dist::reduce_scatter(x, Reduce::kMax, g_comm); },
                 xs, true);
  check_backward("all_to_all", [](const Tensor& x) { return dist::all_to_all(x, g_comm); }, xs, false);
  check_backward("broadcast", [](const Tensor& x) { return dist::broadcast(x, g_size / 2, g_comm); }, xs, false);
  // Uneven: rank r sends rows_from(r, q) rows to rank q.
  std::vector<int64_t> send(g_size), recv(g_size);
  for (int q = 0; q < g_size; ++q) {
    send[q] = rows_from(g_rank, q);
    recv[q] = rows_from(q, g_rank);
  }
  const int64_t rows = std::accumulate(send.begin(), send.end(), int64_t{0});
  if (rows > 0) {
    check_backward("all_to_all uneven",
                   [&](const Tensor& x) { return dist::all_to_all(x, send, recv, g_comm); }, Shape{rows, 3}, false);
  }
}

// ---- synchronised batch norm ----

TEST(SyncBatchNorm, EqualsBatchNormOverTheGlobalBatch) {
  const int64_t n = 3, c = 4, hw = 5;
  std::mt19937 gen(99 + g_rank);
  std::normal_distribution<float> nd(0.5f, 2.f);
  std::vector<float> xv(n * c * hw * hw);
  for (float& v : xv) v = nd(gen);
  std::vector<float> gamma{1.f, 0.5f, 2.f, -1.f}, beta{0.f, 0.1f, -0.2f, 0.3f};
  std::vector<float> wv(xv.size() * g_size);
  std::mt19937 wgen(7);  // the same weights on every rank
  for (float& v : wv) v = nd(wgen);
  const Shape local{n, c, hw, hw}, global{n * g_size, c, hw, hw};

  // Sync: each rank its own rows.
  Tensor x = from_vector(local, xv).set_requires_grad(true);
  Tensor rm = from_vector({c}, std::vector<float>(c, 0.f), true), rv = from_vector({c}, std::vector<float>(c, 1.f), true);
  Tensor g1 = from_vector({c}, gamma).set_requires_grad(true), b1 = from_vector({c}, beta).set_requires_grad(true);
  Tensor y = dist::sync_batch_norm(x, g1, b1, rm, rv, 0.1f, 1e-5f, g_comm);
  std::vector<float> w_local(wv.begin() + g_rank * xv.size(), wv.begin() + (g_rank + 1) * xv.size());
  ASSERT_TRUE(sum(mul(y, from_vector(local, w_local))).backward().ok());

  // Reference: plain batch norm over the gathered batch, on this rank alone.
  Tensor xg = from_vector(global, values(dist::all_gather(from_vector(local, xv), g_comm))).set_requires_grad(true);
  Tensor rm2 = from_vector({c}, std::vector<float>(c, 0.f), true), rv2 = from_vector({c}, std::vector<float>(c, 1.f), true);
  Tensor g2 = from_vector({c}, gamma).set_requires_grad(true), b2 = from_vector({c}, beta).set_requires_grad(true);
  Tensor yg = batch_norm(xg, g2, b2, rm2, rv2, true, 0.1f, 1e-5f);
  ASSERT_TRUE(sum(mul(yg, from_vector(global, wv))).backward().ok());

  auto near = [](const std::vector<float>& a, const std::vector<float>& b, size_t offset, double tol, const char* what) {
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i], b[offset + i], tol * (1 + std::fabs(b[offset + i]))) << what << " element " << i;
    }
  };
  near(values(y), values(yg), g_rank * xv.size(), 1e-5, "y");
  near(values(x.grad()), values(xg.grad()), g_rank * xv.size(), 1e-4, "dx");
  near(values(rm), values(rm2), 0, 1e-6, "running_mean");
  near(values(rv), values(rv2), 0, 1e-5, "running_var");
  // gamma and beta: each rank has its share; their sum over ranks is the global gradient.
  for (auto [mine, ref] : {std::pair{g1, g2}, std::pair{b1, b2}}) {
    const std::vector<float> total = values(dist::all_reduce(mine.grad(), dist::Reduce::kSum, g_comm));
    near(total, values(ref.grad()), 0, 1e-4, "dgamma/dbeta");
  }
}

// ---- data parallel ----

void net_zero_grad(nn::Module& m) { m.zero_grad(); }

class TinyNet final : public nn::Module {
 public:
  TinyNet() {
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& x) override { return (*fc2_)(relu((*fc1_)(x))); }
  std::string type_name() const override { return "TinyNet"; }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

TEST(DataParallel, GradientsAreTheMeanOfTheRanksGradients) {
  TinyNet net;
  std::mt19937 gen(5 + g_rank);
  std::normal_distribution<float> nd;
  std::vector<float> xv(8 * 6);
  for (float& v : xv) v = nd(gen);
  std::vector<int32_t> labels(8);
  for (int i = 0; i < 8; ++i) labels[i] = (i + g_rank) % 3;
  auto loss = [&] { return cross_entropy(net(from_vector({8, 6}, xv)), from_vector_i32({8}, labels)); };
  // Each rank's own gradients, then their mean over the ranks on the host.
  ASSERT_TRUE(loss().backward().ok());
  std::vector<std::vector<float>> want;
  for (const Tensor& p : net.parameters()) {
    std::vector<float> g = values(p.grad());
    MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (float& v : g) v /= g_size;
    want.push_back(g);
  }
  net.zero_grad();

  // Small buckets: several per iteration.
  auto dp = dist::DataParallel::create(net, g_comm, {.bucket_bytes = 256});
  ASSERT_TRUE(dp.ok()) << dp.status();
  for (int iteration = 0; iteration < 2; ++iteration) {
    net.zero_grad();
    ASSERT_TRUE(loss().backward().ok());
    (*dp)->finish();
    const TensorList params = net.parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      const std::vector<float> got = values(params[k].grad());
      ASSERT_EQ(got.size(), want[k].size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[k][i], 1e-6 + 1e-5 * std::fabs(want[k][i]));
    }
  }
  auto fig = (*dp)->figures();
  ASSERT_TRUE(fig.ok()) << fig.status();
  EXPECT_GE(fig->buckets, 2);
  EXPECT_EQ(fig->reductions, 2u * fig->buckets);
  EXPECT_EQ(fig->bucket_bytes, static_cast<size_t>(net.num_parameters()) * sizeof(float));
  // The buckets and gradients sit in the comm/gradient region.
  auto mem = net.parameters()[0].interpreter()->memory_stats();
  ASSERT_TRUE(mem.ok());
  EXPECT_GE(mem->comm.allocated, 2 * fig->bucket_bytes);
}

// Three branches between two layers, one run per iteration (a SPOS supernet in small):
// the same on every rank, as SPOS's seeded sampler makes it.
class BranchNet final : public nn::Module {
 public:
  BranchNet() {
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    for (const char* n : {"a", "b", "c"}) branch_.push_back(register_module(n, std::make_shared<nn::Linear>(16, 16)));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& x) override { return (*fc2_)(relu((*branch_[path])(relu((*fc1_)(x))))); }
  std::string type_name() const override { return "BranchNet"; }
  size_t path = 0;

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_;
  std::vector<std::shared_ptr<nn::Linear>> branch_;
};

// Note [Unused parameters]: a branch no rank ran gets no gradient, is not all-reduced
// (the figures count only the reached parameters' bytes; in buckets of 300 floats, the
// one of c's weight and b's bias is skipped when a runs, and three mix reached and
// unreached parameters) and keeps its values
// through SGD with momentum and weight decay, bit for bit; the reached parameters'
// gradients are the mean of the ranks' own. The test runs with check_arguments, so
// ranks all-reducing unlike counts would fail it.
TEST(DataParallel, ParametersNoRankReachedAreLeftOut) {
  BranchNet net;
  std::mt19937 gen(11 + g_rank);
  std::normal_distribution<float> nd;
  std::vector<float> xv(8 * 6);
  for (float& v : xv) v = nd(gen);
  std::vector<int32_t> labels(8);
  for (int i = 0; i < 8; ++i) labels[i] = (i + 2 * g_rank) % 3;
  auto loss = [&] { return cross_entropy(net(from_vector({8, 6}, xv)), from_vector_i32({8}, labels)); };
  const TensorList params = net.parameters();  // fc1 w b, a w b, b w b, c w b, fc2 w b
  auto branch_of = [](size_t k) { return k >= 2 && k < 8 ? static_cast<int>((k - 2) / 2) : -1; };
  std::vector<std::vector<float>> before;
  for (const Tensor& p : params) before.push_back(values(p));

  auto dp = dist::DataParallel::create(net, g_comm, {.bucket_bytes = 1200});
  ASSERT_TRUE(dp.ok()) << dp.status();
  auto opt = optim::Sgd::create(params, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f});
  ASSERT_TRUE(opt.ok()) << opt.status();
  uint64_t want_bytes = 0;
  for (int iteration = 0; iteration < 4; ++iteration) {
    net.path = static_cast<size_t>(iteration % 2);  // a, b, a, b: never c
    // Each rank's own gradients, averaged on the host: what the reached ones must get.
    net.zero_grad();
    ASSERT_TRUE(loss().backward().ok());
    std::vector<std::vector<float>> want(params.size());
    for (size_t k = 0; k < params.size(); ++k) {
      if (!params[k].grad().defined()) continue;
      want[k] = values(params[k].grad());
      MPI_Allreduce(MPI_IN_PLACE, want[k].data(), static_cast<int>(want[k].size()), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      for (float& v : want[k]) v /= g_size;
    }
    net.zero_grad();
    ASSERT_TRUE(loss().backward().ok());
    (*dp)->finish();
    for (size_t k = 0; k < params.size(); ++k) {
      const int br = branch_of(k);
      const bool reached = br < 0 || static_cast<size_t>(br) == net.path;
      ASSERT_EQ(params[k].grad().defined(), reached) << "parameter " << k << ", iteration " << iteration;
      if (!reached) continue;
      want_bytes += static_cast<uint64_t>(params[k].numel()) * sizeof(float);
      const std::vector<float> got = values(params[k].grad());
      ASSERT_EQ(got.size(), want[k].size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[k][i], 1e-6 + 1e-5 * std::fabs(want[k][i]));
    }
    (*opt)->step();
  }
  auto fig = (*dp)->figures();
  ASSERT_TRUE(fig.ok()) << fig.status();
  EXPECT_EQ(fig->buckets, 5);
  EXPECT_EQ(fig->reduced_bytes, want_bytes);
  EXPECT_EQ(fig->reductions, 4u * 4 + 2);  // the bucket of c's weight and b's bias only when b ran
  for (size_t k = 0; k < params.size(); ++k) {
    if (branch_of(k) == 2) {
      EXPECT_EQ(values(params[k]), before[k]) << "c's parameter " << k << " moved";
    }
    if (branch_of(k) == 0) {
      EXPECT_NE(values(params[k]), before[k]) << "a's parameter " << k << " did not move";
    }
  }
}

// Expert parallelism with every token sent to one expert: a router of zeros gives even
// probabilities, and ties go to expert 0, which rank 0 holds. Every other expert, on
// every other rank, receives no rows and still runs forward and backward (the exchange's
// counts are 0 both ways), so no rank waits for one that skipped a collective. Rank 0's
// expert 0 has a gradient that is not zero; every other expert's is zero. (Run with a
// timeout of 60 s: tests/dist_tests.cmake's moe_ep_forced_routing_np*.)
TEST(MoeExpertParallel, EveryTokenToOneExpertDoesNotHang) {
  const int experts = 2 * g_size;
  models::MoeMlp moe(8, 16, {.experts = experts, .top_k = 1, .dropless = true}, nn::NormalInit{0.3f}, g_comm);
  ASSERT_EQ(static_cast<int>(moe.experts.size()), g_size > 1 ? 2 : experts);
  moe.router->weight = zeros({experts, 8}).set_requires_grad(true);
  std::mt19937 gen(21 + g_rank);
  std::normal_distribution<float> nd;
  std::vector<float> xv(6 * 8);
  for (float& v : xv) v = nd(gen);
  for (int iteration = 0; iteration < 3; ++iteration) {
    net_zero_grad(moe);
    const Tensor y = moe.forward(from_vector({6, 8}, xv));
    ASSERT_TRUE(sum(y).backward().ok());
    ASSERT_EQ(moe.routing().tokens[0].size(), 6u);
    for (size_t j = 0; j < moe.experts.size(); ++j) {
      const int global = moe.first_expert + static_cast<int>(j);
      for (const Tensor& p : moe.experts[j]->parameters()) {
        ASSERT_TRUE(p.grad().defined()) << "expert " << global;
        const std::vector<float> g = values(p.grad());
        const bool zero = std::all_of(g.begin(), g.end(), [](float v) { return v == 0.f; });
        if (global != 0) {
          EXPECT_TRUE(zero) << "expert " << global << " received no rows";
        }
      }
    }
  }
  if (g_rank == 0) {
    const std::vector<float> g = values(moe.experts[0]->fc2->bias.grad());
    EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float v) { return v != 0.f; }));
  }
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  return mtc::testing_main::run(argc, argv, "dist_mpitest", /*check_arguments=*/true, size_t{256} << 20, mtc::g_comm, mtc::g_rank,
                                mtc::g_size);
}
