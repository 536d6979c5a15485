// End-to-end training tests: CIFAR ResNet-20 on synthetic data learns (the loss falls
// over 50 iterations), runs are bit-reproducible from the seed and identical between the
// synchronous and asynchronous interpreter; and the built mtc-train binary (found beside
// this test as ../launch/mtc-train) trains on synthetic and CIFAR-10 data and rejects
// bad input with one error line and status 2.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"

namespace mtc {
namespace {

constexpr int kBatch = 32;

// resnet20_losses: the loss of each iteration of ResNet-20 (batch 32, SGD lr 0.05, momentum 0.9,
// weight decay 5e-4) on synthetic batches; batch k is pool batch k % pool, so with a
// small pool the network can fit its (random) labels and the loss must fall.
std::vector<float> resnet20_losses(uint64_t seed, bool synchronous, int iterations, int pool) {
  RuntimeOptions o;
  o.memory_bytes = size_t{512} << 20;
  o.num_threads = 2;
  o.synchronous = synchronous;
  o.seed = seed;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return {};
  auto m = models::make_model("resnet20");
  EXPECT_TRUE(m.ok()) << m.status();
  auto opt = optim::Sgd::create(m->net->parameters(), {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f});
  EXPECT_TRUE(opt.ok()) << opt.status();
  data::SyntheticData src(m->sample_shape, 10, seed);
  std::vector<float> losses;
  for (int it = 0; it < iterations; ++it) {
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it % pool, kBatch)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return losses;
    auto l = loss->item();
    EXPECT_TRUE(l.ok()) << l.status();
    if (!l.ok()) return losses;
    losses.push_back(*l);
  }
  return losses;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

TEST(TrainResNet20, LossFallsOnSyntheticData) {
  const std::vector<float> l =
      resnet20_losses(/*seed=*/1, /*synchronous=*/false, /*iterations=*/50, /*pool=*/4);
  ASSERT_EQ(l.size(), 50u);
  for (size_t i = 0; i < l.size(); i += 7) std::printf("  iter %2zu loss %.6f\n", i + 1, l[i]);
  // The first loss is about ln(10) = 2.30 (random labels, near-uniform predictions).
  EXPECT_GT(l[0], 1.8f);
  EXPECT_LT(l[0], 3.5f);
  // The last five iterations average less than half the first loss.
  const float tail = (l[45] + l[46] + l[47] + l[48] + l[49]) / 5;
  EXPECT_LT(tail, 0.5f * l[0]) << "mean loss of iterations 46-50 " << tail;
}

TEST(TrainResNet20, BitIdenticalAcrossRunsAndInterpreterModes) {
  const std::vector<float> a = resnet20_losses(7, false, 4, 4);
  const std::vector<float> b = resnet20_losses(7, false, 4, 4);
  const std::vector<float> s = resnet20_losses(7, true, 4, 4);
  const std::vector<float> other = resnet20_losses(8, false, 4, 4);
  ASSERT_EQ(a.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) std::printf("  iter %zu loss %.9g (sync %.9g)\n", i + 1, a[i], s[i]);
  EXPECT_EQ(bits(a), bits(b)) << "same seed, different losses";
  EXPECT_EQ(bits(a), bits(s)) << "synchronous and asynchronous interpreters differ";
  EXPECT_NE(bits(a), bits(other)) << "a different seed gave the same losses";
}

// ---- the mtc-train binary ----

struct ToolRun {
  int status = -1;
  std::string out, err;
};

std::string tool_path() {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  return (self.parent_path() / ".." / "launch" / "mtc-train").lexically_normal().string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

ToolRun run_tool(const std::string& args) {
  const std::string base =
      (std::filesystem::temp_directory_path() / ("mtc_train_test_" + std::to_string(::getpid()))).string();
  const std::string cmd = tool_path() + " " + args + " > " + base + ".out 2> " + base + ".err";
  const int raw = std::system(cmd.c_str());
  ToolRun r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

class MtcTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(tool_path())) GTEST_SKIP() << "mtc-train not built at " << tool_path();
  }
  // expect_bad: status 2 and exactly one stderr line, "mtc-train: error: ..." holding `what`.
  static void expect_bad(const std::string& args, const std::string& what) {
    const ToolRun r = run_tool(args + " --threads=1");
    EXPECT_EQ(r.status, 2) << args << "\nstderr: " << r.err;
    EXPECT_EQ(r.err.rfind("mtc-train: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "expected one line: " << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << "expected '" << what << "' in: " << r.err;
  }
};

TEST_F(MtcTrain, UnknownModel) { expect_bad("--model=resnet19", "expected one of resnet20"); }
TEST_F(MtcTrain, BadEvictionFlags) {
  expect_bad("--budget=lots", "--budget 'lots': expected none, a byte size");
  expect_bad("--budget=1.5", "--budget '1.5'");
  expect_bad("--evict_policy=fifo", "unknown eviction policy 'fifo'");
  expect_bad("--evict_mode=all", "unknown eviction mode 'all'");
}
TEST_F(MtcTrain, UnknownFlag) {
  expect_bad("--bogus=1", "unknown flag --bogus");
  expect_bad("--batch 8 --bogus", "unknown flag --bogus");  // "--flag value" form is skipped over
}
TEST_F(MtcTrain, BatchZeroAndNotANumber) {
  expect_bad("--batch=0", "--batch '0'");
  expect_bad("--batch=-3", "--batch '-3'");
  expect_bad("--batch=lots", "expected a whole number");
  expect_bad("--iterations=0", "--iterations '0'");
}
TEST_F(MtcTrain, MemoryTooSmallForTheParameters) {
  expect_bad("--model=resnet20 --memory=1MiB", "too small for the 272474 parameters of resnet20");
}
TEST_F(MtcTrain, BadMemoryText) {
  expect_bad("--memory=lots", "--memory 'lots' is not a byte size");
  expect_bad("--memory=2XiB", "unknown unit");
}
TEST_F(MtcTrain, BadDeviceAndDataPath) {
  expect_bad("--device=tpu", "expected cpu or cuda");
  expect_bad("--data=cifar10:/nonexistent/cifar", "/nonexistent/cifar");
}

TEST_F(MtcTrain, ShortRunPrintsProgressAndSummary) {
  const ToolRun r =
      run_tool("--model=mlp --batch=8 --iterations=3 --log_every=2 --warmup=1 --memory=256MiB --threads=2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("device: cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\niter 2 loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\niter 4 loss "), std::string::npos) << "1 warm-up + 3 timed iterations\n" << r.out;
  const size_t at = r.out.rfind("summary ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string summary = r.out.substr(at);
  char model[32];
  int batch, iterations;
  double sec, median, least, sps, loss;
  unsigned long long peak;
  ASSERT_EQ(std::sscanf(summary.c_str(),
                        "summary model=%31s batch=%d iterations=%d sec_per_iter=%lf median_sec_per_iter=%lf "
                        "min_sec_per_iter=%lf samples_per_sec=%lf final_loss=%lf peak_compute_bytes=%llu",
                        model, &batch, &iterations, &sec, &median, &least, &sps, &loss, &peak),
            9)
      << summary;
  EXPECT_STREQ(model, "mlp");
  EXPECT_EQ(batch, 8);
  EXPECT_EQ(iterations, 3);
  EXPECT_GT(sec, 0);
  // Of three timed iterations: the least is at most the median, the median at most the
  // largest (3 x mean - the other two, so at most 3 x mean - 2 x least).
  EXPECT_GT(least, 0);
  EXPECT_LE(least, median + 1e-4);
  EXPECT_LE(least, sec + 1e-4);
  EXPECT_LE(median, 3 * sec - 2 * least + 2e-4);
  EXPECT_NEAR(sps, 8 / sec, 0.01 * sps + 0.1);
  EXPECT_GT(loss, 0);
  EXPECT_GT(peak, 7000000u) << "the MLP's 1.84M parameters alone take 7.4 MB";
  EXPECT_EQ(summary.back(), '\n');
  EXPECT_EQ(std::count(summary.begin(), summary.end(), '\n'), 1) << "the summary must be the last line";
}

// write_cifar: `records` CIFAR-10 records (label i % 10, pixels i + p), then `extra`
// stray bytes, to a temporary file; returns its path.
std::string write_cifar(const std::string& name, int records, int extra = 0) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("mtc_train_test_" + std::to_string(::getpid()) + "_" + name))
          .string();
  std::string bytes;
  for (int i = 0; i < records; ++i) {
    bytes += static_cast<char>(i % 10);
    for (int p = 0; p < data::kCifarImageBytes; ++p) bytes += static_cast<char>((i + p) % 256);
  }
  bytes += std::string(extra, '\0');
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST_F(MtcTrain, TrainsOnACifarFileAndRejectsATruncatedOne) {
  const std::string good = write_cifar("good.bin", 20);
  const ToolRun r = run_tool("--model=resnet20 --data=cifar10:" + good +
                             " --batch=8 --iterations=3 --memory=256MiB --threads=2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("cifar10 " + good + ": 20 images"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("summary model=resnet20 batch=8 iterations=3 "), std::string::npos) << r.out;

  const std::string bad = write_cifar("truncated.bin", 3, 500);
  expect_bad("--data=cifar10:" + bad, bad + ": record 3 (at byte 9219) is truncated");
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace mtc
