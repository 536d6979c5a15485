// End-to-end training tests: CIFAR ResNet-20 on synthetic data learns (the loss falls
// over 50 iterations), runs are bit-reproducible from the seed and identical between the
// synchronous and asynchronous interpreter; and the built mtc-train binary (found beside
// this test as ../launch/mtc-train) trains on synthetic and CIFAR-10 data and rejects
// bad input with one error line and status 2.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alloc/plan.h"
#include "gtest/gtest.h"
#include "mtc/checkpoint.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"
#include "nlohmann/json.hpp"

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

// run_tool: mtc-train with `args`; with tool = false, `args` is the whole command.
ToolRun run_tool(const std::string& args, bool tool = true) {
  const std::string base =
      (std::filesystem::temp_directory_path() / ("mtc_train_test_" + std::to_string(::getpid()))).string();
  const std::string cmd = (tool ? tool_path() + " " : std::string()) + args + " > " + base + ".out 2> " + base + ".err";
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
  expect_bad("--budget=lots", "budget 'lots': expected none, bytes with a unit");
  expect_bad("--budget=1.5", "budget '1.5' has no unit");
  expect_bad("--budget=1", "budget '1' has no unit");  // once read as 1 byte
  expect_bad("--budget=0.3", "budget '0.3' has no unit");  // once a fraction in mtc-train only
  expect_bad("--budget=150%", "a percentage must be in (0, 100]");
  expect_bad("--budget=30%peak", "mtc-train does not know the peak");
  expect_bad("--budget=100TiB --memory=256MiB", "above the compute region of 251658240 bytes");
  expect_bad("--budget=30% --evict_policy=none", "with --evict_policy none");
  expect_bad("--evict_policy=fifo", "unknown eviction policy 'fifo'");
  expect_bad("--evict_mode=all", "unknown eviction mode 'all'");
  expect_bad("--max_recomputes_per_op=-1", "--max_recomputes_per_op '-1'");
  expect_bad("--max_recomputes_per_op=many", "--max_recomputes_per_op 'many'");
  expect_bad("--max_recomputes_per_op=8 --evict_policy=none", "--max_recomputes_per_op with --evict_policy none");
  expect_bad("--dte_tune=false --evict_policy=dtr", "--dte_tune with --evict_policy dtr");
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
TEST_F(MtcTrain, BadDtpFlags) {
  expect_bad("--dtp=p5", "--dtp 'p5': expected off, p1, p2, p3 or p4, or auto");
  expect_bad("--dtp=auto --dtp_lambda=1.5", "--dtp_lambda 1.5: expected a number in [0, 1]");
  expect_bad("--dtp=p4 --dtp_lambda=0.5", "--dtp_lambda without --dtp=auto");
  expect_bad("--dtp=auto --budget=64MiB --dtp_state_share=0", "--dtp_state_share 0: expected a number in (0, 1]");
  expect_bad("--dtp=auto --budget=64MiB --dtp_state_share=1.5", "--dtp_state_share 1.5: expected a number in (0, 1]");
  expect_bad("--dtp=auto --dtp_state_share=0.5", "--dtp_state_share without --dtp=auto and a --budget");
  expect_bad("--dtp=p1 --budget=64MiB --dtp_state_share=0.5", "--dtp_state_share without --dtp=auto and a --budget");
  expect_bad("--dtp_report", "--dtp_report without --dtp");
  expect_bad("--dtp_group=2", "--dtp_group without --dtp");
  expect_bad("--dtp=auto --dtp_warmup=1", "--dtp_warmup '1'");
  expect_bad("--dtp_warmup=5", "--dtp_warmup without --dtp");
  expect_bad("--dtp=auto --dtp_group=3", "--dtp_group=3: expected a divisor of the 1 ranks");
  expect_bad("--dtp=auto --dtp_comm=/nonexistent/comm.json", "--dtp_comm /nonexistent/comm.json: cannot read");
  const std::string bad = ::testing::TempDir() + "/dtp_comm_bad.json";
  {
    std::FILE* f = std::fopen(bad.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("{\"backend\": \"mpi\", \"collectives\": {}}\n", f);
    std::fclose(f);
  }
  expect_bad("--dtp=auto --dtp_comm=" + bad, "expected \"world_size\": N with N >= 2");
  std::remove(bad.c_str());
}
TEST_F(MtcTrain, BadDeviceAndDataPath) {
  expect_bad("--device=tpu", "expected cpu or cuda");
  expect_bad("--data=cifar10:/nonexistent/cifar", "/nonexistent/cifar");
}

// The flag contract every tool keeps: a malformed or missing value is status 2 and one
// line of ours (absl's own parser said "ERROR: Illegal value" and exited with 1).
TEST_F(MtcTrain, MalformedOrMissingValues) {
  expect_bad("--tma=maybe", "--tma 'maybe': expected true or false");
  expect_bad("--iterations", "--iterations needs a value");
  expect_bad("stray", "unexpected argument 'stray'");
  expect_bad("--image_size=big", "--image_size 'big'");
  expect_bad("--overfit_batches=-1", "--overfit_batches '-1'");
  expect_bad("--save_every=x --save=x.st", "--save_every 'x'");
}

TEST_F(MtcTrain, HelpAndVersionExitZero) {
  for (const char* flag : {"--help", "-h"}) {
    const ToolRun r = run_tool(flag);
    EXPECT_EQ(r.status, 0) << flag << ": " << r.err;
    EXPECT_NE(r.out.find("--budget VALUE"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("--fail_rank"), std::string::npos) << "testing flags stay out of --help:\n" << r.out;
  }
  const ToolRun full = run_tool("--helpfull");
  EXPECT_EQ(full.status, 0);
  EXPECT_NE(full.out.find("--fail_rank"), std::string::npos) << full.out;
  const ToolRun v = run_tool("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("mtc-train (mtc ", 0), 0u) << v.out;
  EXPECT_NE(v.out.find(" build, backends: cpu"), std::string::npos) << v.out;
  EXPECT_EQ(v.out.find("NDEBUG"), std::string::npos) << v.out;
}

// Flags that a model or optimizer would ignore are refused rather than ignored.
TEST_F(MtcTrain, FlagsTheRunWouldIgnore) {
  expect_bad("--optimizer=adamw --momentum=0.5", "AdamW has no momentum");
  expect_bad("--data=cifar10:/nonexistent --image_size=64", "CIFAR-10 data, whose images are 32x32");
  expect_bad("--model=vit_tiny --image_size=30", "multiple of the patch size 4");
  expect_bad("--model=resnet50 --image_size=16", "expected >= 32");
  expect_bad("--tma_warmup=3", "--tma_warmup without --tma");
  expect_bad("--tma_max_plans=8", "--tma_max_plans without --tma");
  expect_bad("--tma --tma_max_plans=0", "--tma_max_plans '0'");
  expect_bad("--evict_policy=none --evict_mode=drop", "--evict_mode with --evict_policy none");
}

// --image_size sizes every model's synthetic input, the CIFAR ResNets' too (once it
// applied to resnet50 alone and was silently ignored otherwise).
TEST_F(MtcTrain, ImageSizeReachesCifarResNets) {
  const ToolRun r = run_tool("--model=resnet20 --image_size=16 --batch=2 --iterations=1 --warmup=0 --memory=128MiB "
                             "--threads=1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("input [3,16,16]"), std::string::npos) << r.out;
}

// --record_trace: a path that cannot be written is refused before anything runs, and no
// file is left behind; a failure before training starts removes the trace it opened.
TEST_F(MtcTrain, TracePathCheckedBeforeTraining) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mtc_trace_check_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  expect_bad("--record_trace=" + dir.string(), "is a directory");
  expect_bad("--record_trace=" + (dir / "missing" / "t.jsonl").string(), "does not exist");
  expect_bad("--record_trace=" + (dir / "t.jsonl").string() + " --memory=1MiB", "too small for the");
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a refused run left files in " << dir;
  std::filesystem::remove_all(dir);
}

// A run whose loss stops being finite fails (status 1, one line) unless told to go on.
TEST_F(MtcTrain, NonFiniteLossStopsTheRun) {
  const std::string args = "--model=mlp --batch=8 --iterations=6 --warmup=0 --lr=1e30 --memory=256MiB --threads=1";
  const ToolRun r = run_tool(args);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("mtc-train: error: iteration "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("training diverged"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("summary "), std::string::npos) << "no summary for a failed run\n" << r.out;
  const ToolRun go_on = run_tool(args + " --allow_nonfinite");
  EXPECT_EQ(go_on.status, 0) << go_on.err;
  const size_t at = go_on.out.find("final_loss=");
  ASSERT_NE(at, std::string::npos) << go_on.out;
  const std::string value = go_on.out.substr(at + 11, 4);
  EXPECT_TRUE(value.find("nan") != std::string::npos || value.find("inf") != std::string::npos) << go_on.out;
}

// With every core kept busy by another process, the default threads drop to 1 and a note
// says why (each thread would otherwise wait at every parallel region for a core).
TEST_F(MtcTrain, DefaultThreadsSkipBusyCores) {
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (cores < 2) GTEST_SKIP() << "one core: nothing to leave out";
  // A script: one busy loop pinned to each core, mtc-train, then the loops stopped.
  const std::string script =
      (std::filesystem::temp_directory_path() / ("mtc_busy_" + std::to_string(::getpid()) + ".sh")).string();
  {
    std::ofstream f(script);
    f << "for i in $(seq 0 " << cores - 1 << "); do taskset -c $i bash -c 'while :; do :; done' & done\n"
      << "sleep 0.5\n"
      << "env -u OMP_NUM_THREADS " << tool_path()
      << " --model=mlp --batch=4 --iterations=1 --warmup=0 --memory=128MiB\n"
      << "s=$?\nkill $(jobs -p)\nexit $s\n";
  }
  const ToolRun r = run_tool("bash " + script, false);
  std::filesystem::remove(script);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("device: cpu (1 threads)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("were busy at start-up: 1 kernel thread instead of"), std::string::npos) << r.out;
}

TEST_F(MtcTrain, PrintsTheResolvedBudget) {
  const ToolRun r = run_tool("--model=mlp --batch=4 --iterations=1 --warmup=0 --memory=256MiB --comm_memory=16MiB "
                             "--budget=25% --threads=1");
  ASSERT_EQ(r.status, 0) << r.err;
  // 25% of the 240 MiB compute region.
  EXPECT_NE(r.out.find("budget: m* 60.0 MiB (62914560 bytes)"), std::string::npos) << r.out;
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

// --overfit_batches 2: the MLP sees two batches in turn and fits them (the loss of the
// last iteration under a quarter of the first), and the data line says so; without it
// every batch is new and the loss stays near ln 10.
TEST_F(MtcTrain, OverfitBatchesRepeatsTheFirstBatches) {
  auto losses = [](const std::string& out) {
    std::vector<double> l;
    for (size_t at = out.find("\niter "); at != std::string::npos; at = out.find("\niter ", at + 1)) {
      int it = 0;
      double loss = 0;
      if (std::sscanf(out.c_str() + at, "\niter %d loss %lf", &it, &loss) == 2) l.push_back(loss);
    }
    return l;
  };
  const std::string args = "--model=mlp --batch=8 --iterations=30 --warmup=0 --log_every=1 --memory=256MiB "
                           "--threads=2 --optimizer=adamw --lr=1e-3";
  const ToolRun fit = run_tool(args + " --overfit_batches=2");
  ASSERT_EQ(fit.status, 0) << fit.err;
  EXPECT_NE(fit.out.find("its first 2 batches, repeated"), std::string::npos) << fit.out;
  const std::vector<double> a = losses(fit.out);
  ASSERT_EQ(a.size(), 30u) << fit.out;
  EXPECT_LT(a.back(), 0.25 * a.front()) << fit.out;
  const ToolRun fresh = run_tool(args);
  ASSERT_EQ(fresh.status, 0) << fresh.err;
  const std::vector<double> b = losses(fresh.out);
  ASSERT_EQ(b.size(), 30u) << fresh.out;
  EXPECT_EQ(a[0], b[0]) << "the first batch is the same";
  EXPECT_GT(b.back(), 1.0) << fresh.out;
}

// loss_lines: the "iter N loss X" lines of a run's output, from iteration `from` on.
std::vector<std::string> loss_lines(const std::string& out, int from = 1) {
  std::vector<std::string> l;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    int it = 0;
    char loss[32];
    if (std::sscanf(line.c_str(), "iter %d loss %31s", &it, loss) == 2 && it >= from) {
      l.push_back(absl::StrCat(it, " ", loss));
    }
  }
  return l;
}

// same_tensors: two checkpoints' tensors byte for byte (their metadata aside).
void expect_same_tensors(const std::string& a, const std::string& b) {
  absl::StatusOr<checkpoint::SafetensorsFile> x = checkpoint::read_safetensors(a), y = checkpoint::read_safetensors(b);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(x->tensors.size(), y->tensors.size());
  for (const auto& [name, t] : x->tensors) {
    auto it = y->tensors.find(name);
    ASSERT_NE(it, y->tensors.end()) << name;
    EXPECT_TRUE(t.data == it->second.data) << name << " differs";
  }
}

// 3 iterations, a checkpoint, and a run resumed from it for 3 more: the losses of
// iterations 4-6 and the final weights and optimizer state of one 6-iteration run, bit
// for bit. ResNet-20 with SGD and momentum (batch norm's running statistics); the SPOS
// supernet drawing from a pool of 3 paths with AdamW (the samplers' generators); one
// warm-up iteration before the checkpoint.
TEST_F(MtcTrain, ResumeContinuesTheRunBitForBit) {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/mtc_train_test_" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const std::string model : {"--model=resnet20 --momentum=0.9", "--model=spos --spos_pool=3 --optimizer=adamw "
                                                                      "--lr=1e-3"}) {
    SCOPED_TRACE(model);
    const std::string args = model + " --batch=8 --warmup=1 --log_every=1 --memory=512MiB --threads=2";
    const ToolRun whole = run_tool(args + " --iterations=5 --save=" + dir + "/whole.st");
    ASSERT_EQ(whole.status, 0) << whole.err;
    const ToolRun part = run_tool(args + " --iterations=2 --save=" + dir + "/part.st");
    ASSERT_EQ(part.status, 0) << part.err;
    EXPECT_NE(part.out.find("checkpoint: iteration 3 saved to " + dir + "/part.st"), std::string::npos) << part.out;
    const ToolRun rest = run_tool(args + " --iterations=5 --resume=" + dir + "/part.st --save=" + dir + "/rest.st");
    ASSERT_EQ(rest.status, 0) << rest.err;
    EXPECT_NE(rest.out.find("resumed: " + dir + "/part.st, iteration 3"), std::string::npos) << rest.out;
    const std::vector<std::string> want = loss_lines(whole.out, 4), got = loss_lines(rest.out);
    EXPECT_EQ(want.size(), 3u) << whole.out;
    EXPECT_EQ(got, want) << rest.out;
    EXPECT_NE(rest.out.find("iterations=3 "), std::string::npos) << "the summary counts this run's 3: " << rest.out;
    expect_same_tensors(dir + "/whole.st", dir + "/rest.st");
  }
  std::filesystem::remove_all(dir);
}

// A run killed halfway through writing the checkpoint of iteration 3 (--save_every 1)
// leaves the one of iteration 2 whole, and the run resumes from it; the killed write's
// temporary file is all that is left of it.
TEST_F(MtcTrain, AKillWhileSavingLeavesThePreviousCheckpoint) {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/mtc_train_kill_" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/run.st";
  const std::string args = "--model=resnet20 --batch=4 --warmup=0 --log_every=1 --memory=256MiB --threads=2 "
                           "--iterations=4 --save=" + path;
  const ToolRun killed = run_tool(args + " --save_every=1 --fail_rank=0 --fail_iteration=3 --fail_mode=kill_while_saving");
  EXPECT_EQ(killed.status, 128 + SIGKILL) << killed.out << killed.err;
  EXPECT_NE(killed.out.find("checkpoint: iteration 2 saved"), std::string::npos) << killed.out;
  absl::StatusOr<checkpoint::SafetensorsFile> f = checkpoint::read_safetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metadata["iteration"], "2");
  int partial = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with("run.st.tmp.")) {
      ++partial;
      EXPECT_LT(e.file_size(), std::filesystem::file_size(path)) << "the killed write stopped halfway";
    }
  }
  EXPECT_EQ(partial, 1);
  const ToolRun resumed = run_tool(args + " --resume=" + path);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(loss_lines(resumed.out).size(), 2u) << resumed.out;
  std::filesystem::remove_all(dir);
}

// --dtp on one rank (a group of one): every mode trains (batch norm over a "split" batch
// that is the whole batch needs no collective), saves an ordinary checkpoint (no rank
// files) and resumes from it, under another mode too.
TEST_F(MtcTrain, DtpOnOneRankTrainsSavesAndResumes) {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/mtc_train_dtp1_" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string args = "--model=resnet20 --batch=4 --warmup=0 --memory=256MiB --threads=2";
  for (const char* mode : {"p1", "p2", "p3", "p4"}) {
    SCOPED_TRACE(mode);
    const ToolRun r = run_tool(args + " --iterations=2 --dtp=" + mode + " --save=" + dir + "/" + mode + ".st");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir + "/" + mode + ".st.iter2.rank0"));
    const ToolRun back = run_tool(args + " --iterations=3 --dtp=p4 --resume=" + dir + "/" + mode + ".st");
    ASSERT_EQ(back.status, 0) << back.err;
    EXPECT_NE(back.out.find("resumed: " + dir + "/" + mode + ".st, iteration 2"), std::string::npos) << back.out;
  }
  std::filesystem::remove_all(dir);
}

// summary_value: KEY=value of the summary line in `out`, as a number (-1: absent).
double summary_value(const std::string& out, const std::string& key) {
  const size_t line = out.rfind("summary ");
  if (line == std::string::npos) return -1;
  const size_t at = out.find(" " + key + "=", line);
  if (at == std::string::npos) return -1;
  return std::strtod(out.c_str() + at + key.size() + 2, nullptr);
}

// TMA slides the tensors that outlived the traced iterations together below its plan
// (Note [Packing at the boundary] in alloc/tma.cc): a 24-layer GPT whose warm-up leaves its
// optimizer state in the transients' holes keeps a high water 2.5% above its peak of live
// bytes without TMA, and reaches the peak with it, bit for bit the same losses. And
// --tma_problem writes the plan's problem, which reads back as the plan the summary names.
TEST_F(MtcTrain, TmaPacksTheLiveTensorsBelowItsPlanAndWritesItsProblem) {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/mtc_train_tma_" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string args =
      "--model=gpt --layers=24 --hidden=32 --heads=4 --seq=32 --batch=4 --warmup=3 --iterations=1 --threads=2";
  const ToolRun off = run_tool(args);
  ASSERT_EQ(off.status, 0) << off.err;
  const ToolRun on = run_tool(args + " --tma --tma_warmup=2 --tma_problem=" + dir + "/plan.csv");
  ASSERT_EQ(on.status, 0) << on.err;
  const double peak_off = summary_value(off.out, "peak_compute_bytes");
  const double hw_off = summary_value(off.out, "high_water_compute_bytes");
  const double peak = summary_value(on.out, "peak_compute_bytes");
  const double hw = summary_value(on.out, "high_water_compute_bytes");
  std::printf("  without TMA: high water %.0f, peak %.0f (%.4fx); with: %.0f, %.0f (%.4fx), %g compactions\n", hw_off,
              peak_off, hw_off / peak_off, hw, peak, hw / peak, summary_value(on.out, "compactions"));
  EXPECT_GT(hw_off, 1.01 * peak_off) << "the case no longer needs packing: pick another";
  EXPECT_LE(hw, 1.001 * peak);
  EXPECT_GE(summary_value(on.out, "compactions"), 1);
  EXPECT_EQ(summary_value(on.out, "final_loss"), summary_value(off.out, "final_loss"));
  EXPECT_EQ(summary_value(on.out, "tma_plans"), 1);
  EXPECT_GT(summary_value(on.out, "tma_max_plan_sec"), 0);
  absl::StatusOr<alloc::CsvProblem> p = alloc::read_minimalloc_csv(dir + "/plan.csv");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_FALSE(p->buffers.empty());
  ASSERT_EQ(p->offsets.size(), p->buffers.size());
  EXPECT_TRUE(alloc::validate(p->buffers, p->offsets, 256).ok());
  size_t top = 0;
  for (size_t i = 0; i < p->buffers.size(); ++i) top = std::max(top, p->offsets[i] + p->buffers[i].size);
  EXPECT_EQ(static_cast<double>(top), summary_value(on.out, "tma_plan_peak"));
  EXPECT_EQ(static_cast<double>(alloc::lower_bound(p->buffers)), summary_value(on.out, "tma_plan_lower_bound"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/plan.csv.2")) << "one plan, one file";
  std::filesystem::remove_all(dir);
  expect_bad("--tma_problem=" + dir + "/p.csv", "--tma_problem without --tma");
  expect_bad("--tma --tma_problem=" + std::filesystem::temp_directory_path().string(), "is a directory");
}

// Checkpoint flags and files that cannot serve are refused before training, one line
// each, status 2.
TEST_F(MtcTrain, BadCheckpointFlagsAndFiles) {
  expect_bad("--save_every=2", "--save_every without --save: expected --save FILE");
  expect_bad("--save=/nonexistent/x.st", "folder /nonexistent does not exist");
  expect_bad("--resume=/nonexistent/x.st", "--resume: checkpoint '/nonexistent/x.st': no such file");
  const std::string dir = std::filesystem::temp_directory_path().string() + "/mtc_train_badck_" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const ToolRun saved = run_tool("--model=mlp --batch=4 --warmup=0 --iterations=2 --memory=256MiB --threads=2 --save=" +
                                 dir + "/mlp.st");
  ASSERT_EQ(saved.status, 0) << saved.err;
  expect_bad("--model=resnet20 --resume=" + dir + "/mlp.st", "a checkpoint of model mlp, and --model is resnet20");
  {  // a main file naming rank files that are not there
    absl::StatusOr<checkpoint::SafetensorsFile> c = checkpoint::read_safetensors(dir + "/mlp.st");
    ASSERT_TRUE(c.ok()) << c.status();
    c->metadata["rank_files"] = "2";
    c->metadata["rank_files_tag"] = "iter2";
    ASSERT_TRUE(checkpoint::write_safetensors(dir + "/ranked.st", *c).ok());
    expect_bad("--model=mlp --iterations=4 --resume=" + dir + "/ranked.st",
               "ranked.st': rank 0 of 2's file: checkpoint '" + dir + "/ranked.st.iter2.rank0': no such file");
  }
  expect_bad("--model=mlp --warmup=0 --iterations=2 --resume=" + dir + "/mlp.st",
             "saved at iteration 2, and --warmup + --iterations is 2: expected more iterations");
  expect_bad("--model=mlp --optimizer=adamw --resume=" + dir + "/mlp.st",
             "optimizer state of sgd: this run's optimizer is adamw");
  const std::string bytes = slurp(dir + "/mlp.st");
  std::ofstream(dir + "/cut.st", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_bad("--model=mlp --resume=" + dir + "/cut.st", "outside the");
  std::filesystem::remove_all(dir);
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

// --epochs on a CIFAR file: 2 passes over 20 records at batch 8 are ceil(40 / 8) = 5
// iterations, 1 of them warm-up; --augment's crops and flips repeat with the seed (equal
// losses) and change the data (other losses than without it); a cosine schedule prints
// its rate per iteration.
TEST_F(MtcTrain, EpochsAugmentAndScheduleOnCifar) {
  const std::string file = write_cifar("epochs.bin", 20);
  const std::string args = "--model=resnet20 --data=cifar10:" + file +
                           " --batch=8 --epochs=2 --warmup=1 --log_every=1 --memory=256MiB --threads=2";
  const ToolRun plain = run_tool(args);
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_NE(plain.out.find("batch 8, 4 + 1 warm-up iterations"), std::string::npos) << plain.out;
  EXPECT_EQ(loss_lines(plain.out).size(), 5u) << plain.out;
  const ToolRun a = run_tool(args + " --augment"), b = run_tool(args + " --augment");
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(loss_lines(a.out), loss_lines(b.out));
  EXPECT_NE(loss_lines(a.out), loss_lines(plain.out));
  const ToolRun c = run_tool(args + " --lr_schedule=cosine --lr_warmup=2 --lr=0.2");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("schedule: cosine from 0.2 to 0 over 3 iterations after 2 of linear warm-up"),
            std::string::npos) << c.out;
  EXPECT_NE(c.out.find("\niter 1 loss "), std::string::npos);
  EXPECT_NE(c.out.find(" lr 0.1 |"), std::string::npos) << "iteration 1 of 2 warm-up: 0.2 / 2\n" << c.out;
  EXPECT_NE(c.out.find(" lr 0.05 |"), std::string::npos) << "the cosine's middle step\n" << c.out;
  std::filesystem::remove(file);
}

TEST_F(MtcTrain, BadScheduleEpochAndAugmentFlags) {
  expect_bad("--lr_schedule=step", "--lr_schedule step without --lr_step");
  expect_bad("--lr_schedule=linear", "learning-rate schedule 'linear': expected constant, step or cosine");
  expect_bad("--lr_min=0.01", "--lr_min with --lr_schedule constant");
  expect_bad("--lr_schedule=cosine --lr_warmup=60 --iterations=10 --warmup=0",
             "cosine schedule over 10 iterations with 60 of warm-up");
  expect_bad("--epochs=2", "--epochs with --data synthetic: expected a real dataset");
  expect_bad("--augment", "--augment with --data synthetic");
  expect_bad("--epochs=1 --iterations=3", "--epochs with --iterations");
  expect_bad("--epochs=-1", "--epochs '-1'");
}

// write_learnable_cifar: `records` CIFAR-10 records whose class shows in their
// brightness: class c's pixels are 20 + 22 c plus uniform noise in [-15, 15], every
// channel; classes drawn uniformly. A set a small network learns in tens of iterations.
std::string write_learnable_cifar(const std::string& name, int records, uint32_t seed) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("mtc_train_test_" + std::to_string(::getpid()) + "_" + name))
          .string();
  std::mt19937 gen(seed);
  std::string bytes;
  for (int i = 0; i < records; ++i) {
    const int c = static_cast<int>(gen() % 10);
    bytes += static_cast<char>(c);
    for (int p = 0; p < data::kCifarImageBytes; ++p) {
      bytes += static_cast<char>(20 + 22 * c + static_cast<int>(gen() % 31) - 15);
    }
  }
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Evaluation: ResNet-20 on 512 learnable training images, evaluated every 20 iterations
// on 256 held-out ones in eval mode: its top-1 accuracy ends well above chance (10%),
// and top-5 at least top-1. Measured (Release): 68.4%, 80.9%, 80.1%, 81.3% top-1 after
// 20, 40, 60, 80 iterations of AdamW. (SGD at lr 0.05 was erratic in eval mode, its batch
// norm's running statistics lagging: 50% or 29% after 60 iterations by the build's
// rounding.)
TEST_F(MtcTrain, EvaluationReachesAccuracyWellAboveChance) {
  const std::string train = write_learnable_cifar("learn_train.bin", 512, 1);
  const std::string test = write_learnable_cifar("learn_test.bin", 256, 2);
  const ToolRun r = run_tool("--model=resnet20 --data=cifar10:" + train + " --eval_data=cifar10:" + test +
                             " --batch=32 --iterations=80 --warmup=0 --eval_every=20 --optimizer=adamw --lr=1e-3 "
                             "--memory=256MiB --threads=2");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::pair<double, double>> acc;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    int it = 0, k = 0;
    double loss = 0, top1 = 0, topk = 0;
    if (std::sscanf(line.c_str(), "eval iter %d: loss %lf top-1 %lf%% top-%d %lf%%", &it, &loss, &top1, &k, &topk) ==
        5) {
      std::printf("  %s\n", line.c_str());
      EXPECT_EQ(k, 5);
      EXPECT_GE(topk, top1);
      EXPECT_NE(line.find("(256 samples"), std::string::npos) << line;
      acc.emplace_back(top1, topk);
    }
  }
  ASSERT_EQ(acc.size(), 4u) << r.out;
  EXPECT_GT(acc.back().first, 50.0) << "top-1 of 10 classes: chance is 10%";
  std::filesystem::remove(train);
  std::filesystem::remove(test);
}

TEST_F(MtcTrain, BadEvaluationFlags) {
  expect_bad("--eval_batches=3", "--eval_batches without --eval_every");
  expect_bad("--eval_every=-1", "--eval_every '-1'");
  expect_bad("--eval_every=5 --dtp=p1", "--eval_every with --dtp");
  expect_bad("--eval_every=5 --eval_data=cifar10:/nonexistent/test_batch.bin",
             "--eval_data cifar10:/nonexistent/test_batch.bin with --data synthetic");
  const std::string file = write_cifar("eval_file.bin", 20);
  expect_bad("--eval_every=5 --data=cifar10:" + file, "expected --eval_data cifar10:PATH");
  expect_bad("--eval_every=5 --data=cifar10:" + file + " --eval_data=cifar10:/nonexistent/t.bin",
             "/nonexistent/t.bin");
  std::filesystem::remove(file);
}

// On a terminal (a pseudo-terminal from util-linux's script), one line per iteration is
// rewritten in place ("\r", erase line) with the iteration of the total, loss, samples/s,
// memory and the time left, besides the --log_every lines; --progress=plain, or output
// that is not a terminal, has no such line and no escape codes.
TEST_F(MtcTrain, LiveProgressLineOnATerminalOnly) {
  if (std::system("command -v script > /dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1) to make a terminal";
  const std::string args = "--model=mlp --batch=8 --iterations=5 --warmup=0 --log_every=5 --memory=256MiB --threads=2";
  const ToolRun tty = run_tool("script -qfec '" + tool_path() + " " + args + "' /dev/null", /*tool=*/false);
  ASSERT_EQ(tty.status, 0) << tty.out << tty.err;
  for (int it = 1; it <= 5; ++it) {
    EXPECT_NE(tty.out.find("\r\x1b[2Kiter " + std::to_string(it) + "/5 loss "), std::string::npos) << tty.out;
  }
  EXPECT_NE(tty.out.find(" samples/s | compute "), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("s left"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("\r\x1b[2Kiter 5 loss "), std::string::npos) << "the --log_every line clears it\n" << tty.out;
  const ToolRun plain = run_tool("script -qfec '" + tool_path() + " " + args + " --progress=plain' /dev/null", false);
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.out.find("\x1b["), std::string::npos) << plain.out;
  const ToolRun piped = run_tool(args);
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(piped.out.find("\x1b["), std::string::npos) << piped.out;
  EXPECT_EQ(piped.out.find("/5 loss"), std::string::npos) << piped.out;
  expect_bad("--progress=fancy", "--progress 'fancy': expected auto or plain");
}

// --metrics: one JSON object per iteration (parsed here), the losses of the progress
// lines, warm-up iterations marked untimed, the regions' bytes within their capacity, and
// under a budget DTE's totals growing and the compute region's bytes within it.
TEST_F(MtcTrain, MetricsFileIsAJsonObjectPerIteration) {
  const std::string path = std::filesystem::temp_directory_path().string() + "/mtc_train_metrics_" +
                           std::to_string(::getpid()) + ".jsonl";
  const ToolRun r = run_tool("--model=resnet20 --batch=8 --iterations=3 --warmup=1 --log_every=1 --memory=256MiB "
                             "--threads=2 --budget=10MiB --metrics=" + path);
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << "not a JSON object: " << line;
    lines.push_back(std::move(j));
  }
  ASSERT_EQ(lines.size(), 4u);
  const std::vector<std::string> losses = loss_lines(r.out);
  ASSERT_EQ(losses.size(), 4u) << r.out;
  uint64_t evictions = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& j = lines[i];
    EXPECT_EQ(j["iteration"].get<int>(), static_cast<int>(i) + 1);
    EXPECT_EQ(j["timed"].get<bool>(), i > 0);
    EXPECT_EQ(absl::StrCat(i + 1, " ", absl::StrFormat("%.6f", j["loss"].get<double>())), losses[i]);
    EXPECT_EQ(j["budget"].get<uint64_t>(), uint64_t{10} << 20);
    for (const char* region : {"compute", "comm"}) {
      const nlohmann::json& g = j[region];
      EXPECT_LE(g["allocated"].get<uint64_t>(), g["capacity"].get<uint64_t>()) << region;
      EXPECT_LE(g["allocated"].get<uint64_t>(), g["high_water"].get<uint64_t>()) << region;
      EXPECT_GE(g["fragmentation"].get<double>(), 0.0);
    }
    EXPECT_LE(j["compute"]["peak"].get<uint64_t>(), uint64_t{10} << 20) << "the budget holds";
    const uint64_t e = j["evict"]["drop"].get<uint64_t>() + j["evict"]["swap"].get<uint64_t>();
    EXPECT_GE(e, evictions) << "totals since the start";
    evictions = e;
    EXPECT_GT(j["samples_per_sec"].get<double>(), 0);
    EXPECT_NEAR(j["lr"].get<double>(), 0.1, 1e-7);
  }
  EXPECT_GT(evictions, 0u) << "10 MiB is under ResNet-20's peak at batch 8";
  std::filesystem::remove(path);
  expect_bad("--metrics=/nonexistent/m.jsonl", "--metrics /nonexistent/m.jsonl: folder /nonexistent does not exist");
}

// --chrome_trace: valid JSON in the Chrome trace format; op spans on the compute thread,
// DTE's swaps on the copy thread; the "tensors" counter splitting the region's bytes;
// the compute region's counter at every allocation and free, whose largest value is the
// summary's peak and whose values stay within the budget line; the evictions counter
// ending at the metrics file's last totals; a mark per iteration.
TEST_F(MtcTrain, ChromeTraceCountersMatchTheRegionStatistics) {
  const std::string base = std::filesystem::temp_directory_path().string() + "/mtc_train_chrome_" +
                           std::to_string(::getpid());
  const ToolRun r = run_tool("--model=resnet20 --batch=8 --iterations=2 --warmup=0 --memory=256MiB --threads=2 "
                             "--budget=10MiB --chrome_trace=" + base + ".json --metrics=" + base + ".jsonl");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("chrome trace: " + base + ".json"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(base + ".json.partial"));
  std::ifstream in(base + ".json");
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(trace.is_object() && trace["traceEvents"].is_array()) << "not a Chrome trace";
  uint64_t spans = 0, conv = 0, copies = 0, peak = 0, budget = 0, evictions = 0;
  uint64_t allocated = 0, tensors = 0, persistent = 0, swapped = 0;
  std::vector<std::string> marks;
  double last_ts = -1;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const std::string ph = e["ph"].get<std::string>(), name = e["name"].get<std::string>();
    if (ph == "X") {
      ++spans;
      conv += name == "conv2d";
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      const bool copy = e["cat"].get<std::string>() == "copy";
      copies += copy;
      EXPECT_EQ(e["tid"].get<int>(), copy ? 2 : 1) << name;
    } else if (ph == "C") {
      EXPECT_GE(e["ts"].get<double>(), last_ts) << "counters in time order";
      last_ts = e["ts"].get<double>();
      if (name == "compute region") {
        allocated = e["args"]["allocated"].get<uint64_t>();
        peak = std::max(peak, allocated);
      }
      if (name == "tensors") {
        // The split of the region's bytes at that moment: persistent + transient is the
        // region's allocated bytes as its own counter last said.
        ++tensors;
        const nlohmann::json& a = e["args"];
        EXPECT_EQ(a["persistent"].get<uint64_t>() + a["transient"].get<uint64_t>(), allocated);
        persistent = std::max(persistent, a["persistent"].get<uint64_t>());
        swapped = std::max(swapped, a["swapped"].get<uint64_t>());
        EXPECT_GE(a["dropped"].get<double>(), 0.0);
      }
      if (name == "budget") budget = e["args"]["m*"].get<uint64_t>();
      if (name == "evictions") evictions = e["args"]["drop + swap"].get<uint64_t>();
    } else if (ph == "i") {
      marks.push_back(name);
    }
  }
  EXPECT_GT(spans, 100u);
  EXPECT_GT(conv, 0u);
  EXPECT_GT(copies, 0u) << "DTE swaps under the 10 MiB budget: spans on the copy track";
  EXPECT_EQ(marks, (std::vector<std::string>{"iteration 1", "iteration 2"}));
  EXPECT_EQ(budget, uint64_t{10} << 20);
  EXPECT_GT(tensors, 100u);
  EXPECT_GE(persistent, uint64_t{272474} * 4) << "at least ResNet-20's parameters";
  EXPECT_GT(swapped, 0u) << "swaps under the 10 MiB budget: tensors on the host";
  const size_t at = r.out.rfind("peak_compute_bytes=");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(peak, std::stoull(r.out.substr(at + 19))) << "the counter's largest value is the region's peak";
  EXPECT_LE(peak, budget);
  std::ifstream m(base + ".jsonl");
  std::string line, last;
  while (std::getline(m, line)) last = line;
  const nlohmann::json j = nlohmann::json::parse(last);
  EXPECT_EQ(evictions, j["evict"]["drop"].get<uint64_t>() + j["evict"]["swap"].get<uint64_t>());
  EXPECT_GT(evictions, 0u);
  std::filesystem::remove(base + ".json");
  std::filesystem::remove(base + ".jsonl");
  expect_bad("--chrome_trace=/nonexistent/t.json", "--chrome_trace /nonexistent/t.json: folder /nonexistent");
}

}  // namespace
}  // namespace mtc
