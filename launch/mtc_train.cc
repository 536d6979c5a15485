// mtc-train: trains one model for a fixed number of iterations (zero_grad, forward,
// cross_entropy, backward, optimizer step) and reports loss, throughput and peak memory.
// The last line, "summary model=... peak_compute_bytes=...", is parsed by other tools.
// Every bad flag value prints one line "mtc-train: error: ..." and exits with status 2.
// Under mpirun (or torchrun's environment) every rank runs it: the global batch is split
// over the ranks and the gradients are averaged (data parallel); only rank 0 prints, and
// a failure on any rank stops the whole job with a message naming that rank.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstdio>
#include <csignal>
#include <cstdarg>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "cli.h"
#include "comm/communicator.h"
#include "device.h"
#include "mtc/checkpoint.h"
#include "mtc/data.h"
#include "mtc/distributed.h"
#include "mtc/dtp.h"
#include "mtc/models.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"
#include "mtc/status.h"
#include "world.h"

// FlagText: a flag's value exactly as typed; main parses and checks it, so that a value
// that is not even a number gets the same one-line error and exit status 2 as one that
// is out of range (absl's own parser would print its message and exit with 1).
struct FlagText {
  std::string text;
};
bool AbslParseFlag(absl::string_view text, FlagText* f, std::string*) {
  f->text = std::string(text);
  return true;
}
std::string AbslUnparseFlag(const FlagText& f) { return f.text; }

ABSL_FLAG(std::string, model, "resnet20",
          "model: resnet20|resnet32|resnet44|resnet56|resnet110|resnet1202|resnet50|mlp|vit_tiny|vgg16|gpt|moe_gpt|"
          "lstm|treelstm|densenet121|densenet121_cifar|googlenet|googlenet_cifar|unet|spos");
ABSL_FLAG(std::string, gpt_config, "tiny",
          "gpt: the configuration the other gpt flags start from: tiny (2 layers, hidden 64, 4 heads, seq 16, vocab "
          "128) or small (GPT-2 small: 12 layers, hidden 768, 12 heads, seq 1024, vocab 50257)");
ABSL_FLAG(FlagText, layers, {"config"}, "gpt: decoder blocks; lstm: LSTM layers (>= 1); default: --gpt_config's");
ABSL_FLAG(FlagText, hidden, {"config"}, "gpt, lstm: width D (>= 1, a multiple of --heads); default: --gpt_config's");
ABSL_FLAG(FlagText, heads, {"config"}, "gpt: attention heads (>= 1, dividing --hidden); default: --gpt_config's");
ABSL_FLAG(FlagText, seq, {"config"}, "gpt, lstm: tokens per sequence (>= 1); default: --gpt_config's");
ABSL_FLAG(FlagText, vocab, {"config"}, "gpt, lstm: vocabulary size (>= 1); default: --gpt_config's");
ABSL_FLAG(bool, tied_head, true, "gpt: the LM head is the token embedding (false: a Linear(hidden, vocab) of its own)");
ABSL_FLAG(FlagText, batch, {"64"}, "samples per iteration (>= 1)");
ABSL_FLAG(FlagText, iterations, {"50"}, "timed training iterations, after the --warmup ones (>= 1)");
ABSL_FLAG(FlagText, lr, {"0.1"}, "learning rate (>= 0); with --lr_schedule, the schedule's base rate");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "learning rate by iteration: constant | step (times --lr_gamma every --lr_step iterations) | cosine (to "
          "--lr_min over the run), after --lr_warmup iterations of linear warm-up (PyTorch's LinearLR, StepLR, "
          "CosineAnnealingLR)");
ABSL_FLAG(FlagText, lr_warmup, {"0"}, "iterations of linear learning-rate warm-up, lr * t / N (>= 0)");
ABSL_FLAG(FlagText, lr_step, {"0"}, "--lr_schedule step: iterations between decays (>= 1)");
ABSL_FLAG(FlagText, lr_gamma, {"0.1"}, "--lr_schedule step: the factor of each decay, in (0, 1]");
ABSL_FLAG(FlagText, lr_min, {"0"}, "--lr_schedule cosine: the rate it ends at, in [0, --lr]");
ABSL_FLAG(FlagText, eval_every, {"0"},
          "evaluate on held-out data every this many iterations and after the last, in eval mode (batch norm's "
          "running statistics, no dropout): loss and top-1 / top-5 accuracy (0: never)");
ABSL_FLAG(std::string, eval_data, "",
          "the held-out data: cifar10:PATH (default with --data cifar10:DIR: DIR/test_batch.bin), or synthetic (the "
          "default with synthetic data: batches drawn apart from the training ones)");
ABSL_FLAG(FlagText, eval_batches, {"0"},
          "batches of --batch per evaluation (0: the whole CIFAR-10 test file, rounded up to whole batches; 10 for "
          "synthetic data)");
ABSL_FLAG(FlagText, epochs, {"0"},
          "train this many passes over a real dataset (cifar10:PATH) instead of --iterations: iterations = "
          "ceil(epochs x records / batch) - --warmup (0: --iterations decides)");
ABSL_FLAG(bool, augment, false,
          "CIFAR-10: random 32x32 crops of the image padded by 4 and horizontal flips, as torchvision's "
          "RandomCrop(32, padding=4) and RandomHorizontalFlip(); seeded by --seed and each record's position");
ABSL_FLAG(FlagText, momentum, {"0.9"}, "SGD momentum (>= 0); sgd only (adamw has none)");
ABSL_FLAG(FlagText, weight_decay, {"5e-4"}, "weight decay (>= 0); decoupled for adamw");
ABSL_FLAG(FlagText, adam_eps, {"1e-8"}, "adamw's epsilon, added to the root of the second moment (> 0)");
ABSL_FLAG(std::string, optimizer, "sgd", "optimizer: sgd|adamw");
ABSL_FLAG(FlagText, moe_experts, {"4"}, "--model moe_gpt: experts in each MoE block (>= 2; every other block)");
ABSL_FLAG(FlagText, moe_top_k, {"1"}, "--model moe_gpt: experts per token: 1 (Switch) or 2 (GShard)");
ABSL_FLAG(FlagText, moe_capacity, {"1.25"},
          "--model moe_gpt: capacity factor: an expert takes at most ceil(factor * top_k * tokens / experts) tokens "
          "of a batch, the overflow passing through the residual (> 0)");
ABSL_FLAG(bool, moe_dropless, false, "--model moe_gpt: no capacity: every token reaches its experts");
ABSL_FLAG(FlagText, moe_groups, {"1"},
          "--model moe_gpt: route each rank's batch in this many groups of tokens, each with its own capacity and "
          "load-balancing loss (GShard's groups; one rank with N groups computes what N data-parallel ranks do)");
ABSL_FLAG(bool, moe_expert_parallel, false,
          "--model moe_gpt: spread each MoE block's experts over the ranks (expert parallelism: tokens travel to "
          "their experts' ranks by all_to_all); --moe_experts a multiple of the ranks");
ABSL_FLAG(FlagText, moe_bucket, {"0"},
          "--model moe_gpt: run each expert on its token count rounded up to a multiple of this (at most the "
          "capacity), so that shapes recur and TMA plans them; >= the capacity: every expert on exactly the "
          "capacity; 0: the exact counts");
ABSL_FLAG(FlagText, moe_aux_alpha, {"0.01"},
          "--model moe_gpt: weight of the load-balancing loss alpha * E * sum_i f_i * P_i added to the loss (>= 0)");
ABSL_FLAG(std::string, spos_path, "",
          "--model spos: train (or evaluate) this one path, 20 choices in 0-3 comma-separated (0-2: ShuffleNetV2 "
          "units with 3x3, 5x5, 7x7 depthwise kernels; 3: the Xception-like unit); default: a path drawn per "
          "iteration");
ABSL_FLAG(std::string, spos_flops, "",
          "--model spos: draw only paths whose multiply-adds lie in MIN,MAX millions (the paper's FLOPs-range "
          "sampler), e.g. 290,360 at --image_size 224; default: uniform over all paths");
ABSL_FLAG(FlagText, spos_pool, {"0"},
          "--model spos: draw this many paths once, then each iteration one of them, uniformly (recurring paths, "
          "whose TMA plans recur too); 0: a fresh path every iteration");
ABSL_FLAG(FlagText, seed, {"0"}, "seed of parameter initialisation, synthetic data and shuffling");
ABSL_FLAG(std::string, device, "cpu", "device: cpu|cuda");
ABSL_FLAG(std::string, data, "synthetic",
          "data: synthetic | cifar10:PATH (a directory with data_batch_1..5.bin, or one file)");
ABSL_FLAG(FlagText, overfit_batches, {"0"},
          "train on the first this many batches of --data, in turn (a check that the model can fit a few batches, "
          "as PyTorch Lightning's overfit_batches); 0: a new batch every iteration");
ABSL_FLAG(std::string, memory, "auto",
          "device arena in bytes, e.g. 2GiB; auto: a quarter of RAM (CPU, at most 16 GiB) or 90% of free GPU "
          "memory, divided among the ranks on the machine that share it");
ABSL_FLAG(std::string, comm_memory, "auto",
          "comm/gradient region inside the arena, e.g. 128MiB; auto: 1/16 of the arena");
ABSL_FLAG(FlagText, threads, {"0"},
          "CPU kernel threads; 0: OMP_NUM_THREADS, else the cores this process may use divided among the ranks on "
          "the machine");
ABSL_FLAG(FlagText, image_size, {"auto"},
          "input height and width of synthetic data; auto: 224 for resnet50, else 32 (CIFAR-10 data is 32)");
ABSL_FLAG(FlagText, num_classes, {"10"}, "classes of the model's output and of synthetic labels (>= 1)");
ABSL_FLAG(FlagText, log_every, {"10"}, "print a progress line every this many iterations (>= 1)");
ABSL_FLAG(std::string, progress, "auto",
          "auto: on a terminal, and not under mpirun or torchrun, one line rewritten in place every iteration "
          "(iteration, loss, samples/s, memory, time left) besides the --log_every lines; plain: the --log_every "
          "lines only (as when the output is not a terminal)");
ABSL_FLAG(FlagText, warmup, {"2"}, "untimed training iterations before the timed ones (>= 0)");
ABSL_FLAG(std::string, metrics, "",
          "write one JSON object per iteration to this file (JSON lines, flushed each iteration): loss, learning "
          "rate, time, samples/s, each region's bytes, DTE's and TMA's totals (docs/metrics.md); with more than one "
          "rank each writes FILE.rank<R>, or the name with %r replaced by its rank");
ABSL_FLAG(std::string, chrome_trace, "",
          "write the run's timeline as a Chrome trace (open it in ui.perfetto.dev): op spans, each region's bytes "
          "at every allocation and free, the budget, evictions, iteration marks (docs/metrics.md); with more than "
          "one rank each writes FILE.rank<R>, or the name with %r replaced by its rank");
ABSL_FLAG(std::string, record_trace, "",
          "write the executed op stream to this file as JSON lines (docs/trace-format.md), for mtc-replay; with "
          "more than one rank each writes FILE.rank<R>, or the name with %r replaced by its rank");
ABSL_FLAG(std::string, budget, "none",
          "DTE: compute-region budget m*: bytes with a unit (300MiB), a percentage of the compute region (30%), "
          "or none (evict only when an allocation does not fit the region)");
ABSL_FLAG(std::string, evict_policy, "mtc", "DTE: eviction policy: mtc|dtr|lru|largest|capuchin|none");
ABSL_FLAG(std::string, evict_mode, "both", "DTE: evictions allowed: both|drop|swap");
ABSL_FLAG(bool, dte_tune, mtc::EvictOptions{}.tune,
          "DTE, policy mtc: once two iterations are done, replay them under each candidate score (with and without "
          "beta^ret, DTR's weighting, and the dtr policy where swaps are allowed), on the recorded op times and four "
          "jittered copies, and keep the last unless another is 2% lower on the mean and in four of five copies "
          "(docs/dte.md, \"Tuning the score\": the order of the candidates)");
ABSL_FLAG(FlagText, max_recomputes_per_op, {"16"},
          "DTE: stop an op, naming it, once one tensor has been recomputed this many times to make its inputs "
          "resident (a recompute storm: the budget is too small; 0: never)");
ABSL_FLAG(bool, tma, false,
          "TMA: trace the first --tma_warmup iterations, then place transient tensors at planned offsets");
ABSL_FLAG(FlagText, tma_warmup, {"5"}, "TMA: iterations traced before the first plan (>= 1)");
ABSL_FLAG(FlagText, tma_time_limit, {"1"}, "TMA: seconds the planner may take per iteration shape (> 0)");
ABSL_FLAG(FlagText, tma_max_plans, {"32"},
          "TMA: plans kept, one per recurring iteration shape; past it the least recently seen is dropped (>= 1)");
ABSL_FLAG(std::string, tma_problem, "",
          "TMA: write each plan's problem (its transient buffers: id, lower, upper, size, offset) as a MiniMalloc "
          "CSV for mtc-plan: the first plan to this file, the k-th to FILE.k (per rank: FILE.rankR)");
ABSL_FLAG(bool, sync, false,
          "run the interpreter synchronously (each op on the calling thread; for debugging)");
ABSL_FLAG(std::string, comm_backend, "auto",
          "how ranks talk: auto|local|mpi|nccl; auto: nccl on GPUs, mpi on CPUs, none when alone");
ABSL_FLAG(bool, sync_bn, false,
          "batch norm over the global batch: statistics all-reduced over the ranks (as SyncBatchNorm), under data "
          "parallel and --dtp alike; without it each rank normalises the rows it holds by their own statistics "
          "(as DistributedDataParallel)");
ABSL_FLAG(std::string, bucket_size, "2MiB", "data parallel: gradient bytes per all-reduce bucket");
ABSL_FLAG(bool, comm_check, false, "check that every rank passes matching arguments to each collective (debug)");
ABSL_FLAG(std::string, dtp, "off",
          "dynamic tensor partition over the ranks: off (data parallel) | p1 | p2 | p3 | p4, one mode for every op "
          "that has it | auto, each op's mode chosen by the cost model as it is issued (docs/dtp.md)");
ABSL_FLAG(FlagText, dtp_group, {"0"},
          "DTP over groups of this many ranks with data parallel across the groups (a divisor of the ranks; "
          "0: all ranks in one group)");
ABSL_FLAG(FlagText, dtp_lambda, {"0.1"},
          "--dtp=auto: weight of memory against time in [0, 1] (0: fastest mode that fits, 1: smallest)");
ABSL_FLAG(FlagText, dtp_state_share, {"0.5"},
          "--dtp=auto with --budget: the share in (0, 1] of the budget that stored state (parameters, optimizer "
          "state, buffers) may take; the rest is kept for the working set eviction cannot free");
ABSL_FLAG(FlagText, dtp_warmup, {"3"},
          "DTP: iterations before the cost model's rates are fitted, to the op times of iterations 2 to this one "
          "(at least 2); decisions until then use the default rates");
ABSL_FLAG(bool, dtp_report, false,
          "DTP: print each new decision (every signature's predicted time and memory) and, in the summary, each "
          "decision's predicted and measured forward time");
ABSL_FLAG(std::string, dtp_comm, "",
          "DTP: mtc-bench-comm's alpha-beta JSON for the collectives' cost (default: the backend's figures, "
          "docs/dtp.md)");
ABSL_FLAG(bool, allow_nonfinite, false,
          "keep training when the loss becomes NaN or infinite (default: stop with an error, exit status 1)");
ABSL_FLAG(FlagText, fail_rank, {"-1"}, "testing: this rank fails at --fail_iteration (-1: none)");
ABSL_FLAG(FlagText, fail_iteration, {"1"}, "testing: the iteration at which --fail_rank fails (>= 1)");
ABSL_FLAG(std::string, fail_mode, "error",
          "testing: how --fail_rank fails: error|exception|kill|kill_while_saving (killed halfway through writing "
          "the checkpoint of --fail_iteration)");
ABSL_FLAG(std::string, save, "",
          "write a checkpoint (safetensors: parameters, buffers, optimizer state, data position, random generators; "
          "docs/checkpoints.md) to this file at the end, and every --save_every iterations; a temporary file renamed "
          "over it, so a kill never leaves half a file; under --dtp or --moe_expert_parallel each rank also writes "
          "FILE.iterI.rankR, its own tensors");
ABSL_FLAG(std::string, weights, "",
          "start from the parameters and buffers of this safetensors file (PyTorch's state_dict saved with "
          "safetensors, torchvision's names for resnet50; or an mtc checkpoint), the optimizer fresh");
ABSL_FLAG(FlagText, save_every, {"0"}, "with --save: also save every this many iterations (0: at the end only)");
ABSL_FLAG(std::string, resume, "",
          "continue the run that saved this checkpoint from its iteration, up to --warmup + --iterations: the same "
          "losses and weights as one run without the stop");

namespace mtc {
namespace {

constexpr int kBadValue = 2;  // exit status for a bad flag value or too little memory
constexpr int kFailure = 1;   // exit status for any other error at run time

launch::World g_world;  // this process's place in the job (one rank when started alone)
std::string g_command_line;  // the arguments, for a checkpoint's metadata
bool g_comm_started = false;  // comm::init has run: the ranks are connected
// g_pending_trace: the trace file this run opened, while no iteration has run yet; a
// failure before training starts removes it, so that bad input leaves nothing behind.
std::string g_pending_trace;
std::string g_pending_chrome;  // the same for --chrome_trace's file

// fail: the one error line, then exit without running destructors (the interpreter's
// worker may still hold commands; nothing of it needs saving). Before the ranks connect,
// every rank checks the same flags: a bad one is reported by rank 0 alone. After, with
// more than one rank the line names this rank, and the whole job stops (MPI_Abort): no
// rank is left waiting in a collective for this one.
// The live progress line (a terminal only): shown while an iteration's line is on the
// screen without its newline; anything else printed clears it first.
bool g_live_line = false;
void clear_live_line() {
  if (!g_live_line) return;
  std::fputs("\r\x1b[2K", stdout);
  std::fflush(stdout);
  g_live_line = false;
}

[[noreturn]] void fail(int status, const std::string& what) {
  clear_live_line();
  if (!g_pending_trace.empty()) std::remove(g_pending_trace.c_str());
  if (!g_pending_chrome.empty()) std::remove(g_pending_chrome.c_str());
  if (g_comm_started && (g_world.size > 1 || comm::mpi_initialized())) {
    comm::abort_job(status, absl::StrCat("mtc-train: error: rank ", g_world.rank, " of ", g_world.size, ": ", what));
  }
  if (status == kBadValue) cli::fail_flags("mtc-train", what);
  cli::fail("mtc-train", status, what);
}


// out: printf on rank 0 only; the other ranks print nothing but errors.
__attribute__((format(printf, 1, 2))) void out(const char* fmt, ...) {
  if (g_world.rank != 0) return;
  clear_live_line();
  va_list args;
  va_start(args, fmt);
  std::vprintf(fmt, args);
  va_end(args);
}

template <typename T>
T value_or_exit(absl::StatusOr<T> v, const std::string& prefix = "") {
  if (!v.ok()) fail(kBadValue, absl::StrCat(prefix, v.status().message()));
  return *std::move(v);
}

// int_flag: the flag as a whole number in [lo, hi].
absl::StatusOr<int64_t> int_flag(const char* name, const FlagText& f, int64_t lo, int64_t hi = INT32_MAX) {
  int64_t v;
  if (!absl::SimpleAtoi(f.text, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " '", f.text, "': expected a whole number in [", lo, ", ", hi, "]"));
  }
  return v;
}

// real_flag: the flag as a finite number >= 0.
absl::StatusOr<double> real_flag(const char* name, const FlagText& f) {
  double v;
  if (!absl::SimpleAtod(f.text, &v) || !std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " '", f.text, "': expected a number >= 0"));
  }
  return v;
}

// bytes_flag: "auto" (0) or a byte size such as 2GiB.
absl::StatusOr<size_t> bytes_flag(const char* name, const std::string& text) {
  if (text == "auto") return size_t{0};
  absl::StatusOr<size_t> b = parse_bytes(text);
  if (!b.ok()) return absl::InvalidArgumentError(absl::StrCat("--", name, " ", b.status().message()));
  if (*b == 0)
    return absl::InvalidArgumentError(absl::StrCat("--", name, " '", text, "': expected a size > 0 or auto"));
  return b;
}

std::string mib(size_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

struct Flags {
  std::string model, optimizer, data;
  int batch, iterations, threads, image_size, num_classes, log_every, warmup;
  double lr, momentum, weight_decay, adam_eps;
  uint64_t seed;
  RuntimeOptions runtime;
  // Ranks.
  std::string comm_backend;
  bool sync_bn, comm_check, allow_nonfinite;
  dtp::Mode dtp = dtp::Mode::kNone;  // --dtp (kNone with dtp_auto: auto)
  bool dtp_auto = false, dtp_report = false;
  // any_dtp: DTP in some form (a forced mode or auto) rather than data parallel.
  bool any_dtp() const { return dtp != dtp::Mode::kNone || dtp_auto; }
  double dtp_lambda = 0.1;
  double dtp_state_share = 0.5;
  std::string dtp_comm, dtp_comm_text;
  int dtp_group = 0;  // ranks per partition group (0: all)
  int dtp_warmup = 3;  // iterations before the rates' fit
  size_t bucket_bytes;
  int fail_rank, fail_iteration;
  std::string fail_mode;
  std::string save, resume, weights;  // --save, --resume, --weights: checkpoint files (empty: none)
  optim::LrSchedule schedule;         // --lr with --lr_schedule and its flags
  double epochs = 0;                  // --epochs (0: --iterations decides)
  bool live_progress = false;  // --progress auto on a terminal (rank 0)
  std::string metrics;         // --metrics: this rank's file (empty: none)
  int eval_every = 0, eval_batches = 0;  // --eval_every (0: none), --eval_batches (0: settled in open_input)
  std::string eval_data;
  bool augment = false;
  int save_every = 0;
  models::GptConfig gpt;  // --model gpt
  std::vector<int> spos_path;                  // --model spos: a fixed path, or empty
  int64_t spos_min_flops = 0, spos_max_flops = 0;  // --spos_flops, in multiply-adds
  int overfit_batches = 0;                         // --overfit_batches (0: none)
  int spos_pool = 0;                               // --spos_pool: recurring paths (0: none)
  models::MoeConfig moe;                           // --model moe_gpt: --moe_*
  bool moe_expert_parallel = false;
};

// read_spos_flags: --spos_path, --spos_flops and --spos_pool, with --model spos only;
// a fixed path with neither of the others. On several ranks every rank draws the same
// path (the sampler is seeded by --seed), so data parallel all-reduces the same units.
void read_spos_flags(Flags& f) {
  for (const char* name : {"spos_path", "spos_flops", "spos_pool"}) {
    if (f.model != "spos" && cli::given(name)) {
      fail(kBadValue, absl::StrCat("--", name, " with --model ", f.model, ": it chooses the SPOS supernet's path; "
                                   "expected --model spos"));
    }
  }
  if (f.model != "spos") return;
  for (const char* name : {"spos_flops", "spos_pool"}) {
    if (cli::given("spos_path") && cli::given(name)) {
      fail(kBadValue, absl::StrCat("--spos_path with --", name, ": a fixed path is not drawn; expected one of them"));
    }
  }
  f.spos_pool = static_cast<int>(value_or_exit(int_flag("spos_pool", absl::GetFlag(FLAGS_spos_pool), 0, 1 << 20)));
  if (const std::string text = absl::GetFlag(FLAGS_spos_path); !text.empty()) {
    f.spos_path = value_or_exit(models::parse_spos_path(text), "--spos_path: ");
  }
  if (const std::string text = absl::GetFlag(FLAGS_spos_flops); !text.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(text, ',');
    double lo = 0, hi = 0;
    if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &lo) || !absl::SimpleAtod(parts[1], &hi) || !(lo >= 0) ||
        !(hi > lo) || !std::isfinite(hi)) {
      fail(kBadValue, absl::StrCat("--spos_flops '", text, "': expected MIN,MAX in millions of multiply-adds, "
                                   "0 <= MIN < MAX (e.g. 290,360)"));
    }
    f.spos_min_flops = static_cast<int64_t>(lo * 1e6);
    f.spos_max_flops = static_cast<int64_t>(hi * 1e6);
  }
}

// read_gpt_flags: --gpt_config and the flags that override its fields; refused with any
// model but the language models, as --image_size and --num_classes are with them; --heads
// and --tied_head configure the GPT's attention and head alone.
void read_gpt_flags(Flags& f) {
  const char* const gpt_flags[] = {"gpt_config", "layers", "hidden", "heads", "seq", "vocab", "tied_head"};
  if (!models::is_language_model(f.model)) {
    for (const char* name : gpt_flags) {
      if (cli::given(name)) {
        fail(kBadValue, absl::StrCat("--", name, " with --model ", f.model,
                                     ": it configures a language model; expected --model gpt, moe_gpt, lstm or treelstm"));
      }
    }
    return;
  }
  for (const char* name : {"image_size", "num_classes"}) {
    if (cli::given(name)) {
      fail(kBadValue, absl::StrCat("--", name, " with --model ", f.model, ": its input is --seq token ids and its "
                                   "classes the --vocab tokens; expected no --", name));
    }
  }
  const bool attention = f.model == "gpt" || f.model == "moe_gpt";
  if (!attention) {
    const char* expected = f.model == "treelstm" ? "--hidden, --seq and --vocab only" : "--layers, --hidden, --seq and --vocab only";
    for (const char* name : {"heads", "tied_head"}) {
      if (cli::given(name)) {
        fail(kBadValue, absl::StrCat("--", name, " with --model ", f.model, ": it configures the GPT's ",
                                     name == std::string("heads") ? "attention" : "head", "; expected ", expected));
      }
    }
    if (f.model == "treelstm" && cli::given("layers")) {
      fail(kBadValue, absl::StrCat("--layers with --model treelstm: the Tree-LSTM has one cell, applied at every "
                                   "node of the tree; expected ", expected));
    }
  }
  f.gpt = value_or_exit(models::gpt_config(absl::GetFlag(FLAGS_gpt_config)), "--gpt_config: ");
  auto field = [](const char* name, const FlagText& text, auto& value, int64_t hi) {
    if (text.text != "config") value = value_or_exit(int_flag(name, text, 1, hi));
  };
  field("layers", absl::GetFlag(FLAGS_layers), f.gpt.layers, 4096);
  field("hidden", absl::GetFlag(FLAGS_hidden), f.gpt.hidden, 1 << 20);
  field("heads", absl::GetFlag(FLAGS_heads), f.gpt.heads, 1 << 20);
  field("seq", absl::GetFlag(FLAGS_seq), f.gpt.seq, 1 << 20);
  field("vocab", absl::GetFlag(FLAGS_vocab), f.gpt.vocab, 1 << 24);
  f.gpt.tied_head = absl::GetFlag(FLAGS_tied_head);
  if (attention && f.gpt.hidden % f.gpt.heads != 0) {  // the recurrent models have no attention
    fail(kBadValue, absl::StrCat("--heads ", f.gpt.heads, " does not divide --hidden ", f.gpt.hidden,
                                 ": expected a number of heads that divides the hidden width"));
  }
}

// read_moe_flags: --moe_*, with --model moe_gpt only.
void read_moe_flags(Flags& f) {
  const char* const names[] = {"moe_experts", "moe_top_k", "moe_capacity", "moe_dropless", "moe_aux_alpha",
                               "moe_bucket", "moe_groups", "moe_expert_parallel"};
  for (const char* name : names) {
    if (f.model != "moe_gpt" && cli::given(name)) {
      fail(kBadValue, absl::StrCat("--", name, " with --model ", f.model,
                                   ": it configures the mixture of experts; expected --model moe_gpt"));
    }
  }
  if (f.model != "moe_gpt") return;
  f.moe.experts = static_cast<int>(value_or_exit(int_flag("moe_experts", absl::GetFlag(FLAGS_moe_experts), 2, 4096)));
  f.moe.top_k = static_cast<int>(value_or_exit(int_flag("moe_top_k", absl::GetFlag(FLAGS_moe_top_k), 1, 2)));
  const FlagText capacity = absl::GetFlag(FLAGS_moe_capacity);
  f.moe.capacity_factor = value_or_exit(real_flag("moe_capacity", capacity));
  if (f.moe.capacity_factor == 0) fail(kBadValue, "--moe_capacity '" + capacity.text + "': expected a number > 0");
  f.moe.aux_alpha = static_cast<float>(value_or_exit(real_flag("moe_aux_alpha", absl::GetFlag(FLAGS_moe_aux_alpha))));
  f.moe.dropless = absl::GetFlag(FLAGS_moe_dropless);
  f.moe.bucket = value_or_exit(int_flag("moe_bucket", absl::GetFlag(FLAGS_moe_bucket), 0, 1 << 30));
  f.moe.groups = static_cast<int>(value_or_exit(int_flag("moe_groups", absl::GetFlag(FLAGS_moe_groups), 1, 1 << 20)));
  f.moe_expert_parallel = absl::GetFlag(FLAGS_moe_expert_parallel);
  if (f.moe.dropless && cli::given("moe_capacity")) {
    fail(kBadValue, "--moe_capacity with --moe_dropless: a dropless MoE has no capacity; expected one of them");
  }
  if (f.moe.top_k > f.moe.experts) {
    fail(kBadValue, absl::StrCat("--moe_top_k ", f.moe.top_k, " with ", f.moe.experts, " experts: expected at most --moe_experts"));
  }
}

// read_checkpoint_flags: --save, --save_every and --resume. The file to resume from is
// read and checked in open_input; here, what the flags alone decide: a folder to write
// into.
void read_checkpoint_flags(Flags& f) {
  f.save = absl::GetFlag(FLAGS_save);
  f.resume = absl::GetFlag(FLAGS_resume);
  f.weights = absl::GetFlag(FLAGS_weights);
  if (cli::given("weights") && f.weights.empty()) fail(kBadValue, "--weights '': expected a safetensors file");
  if (!f.weights.empty() && !f.resume.empty()) {
    fail(kBadValue, "--weights with --resume: a checkpoint holds the weights already; expected one of them");
  }
  f.save_every = static_cast<int>(value_or_exit(int_flag("save_every", absl::GetFlag(FLAGS_save_every), 0)));
  if (f.save_every > 0 && f.save.empty()) fail(kBadValue, "--save_every without --save: expected --save FILE");
  if (cli::given("save") && f.save.empty()) fail(kBadValue, "--save '': expected a file name");
  if (cli::given("resume") && f.resume.empty()) fail(kBadValue, "--resume '': expected a checkpoint file");
  if (!f.save.empty()) {
    if (absl::Status s = cli::check_output_file("save", f.save); !s.ok()) fail(kBadValue, std::string(s.message()));
  }
  if (f.fail_mode == "kill_while_saving" && f.save.empty()) {
    fail(kBadValue, "--fail_mode kill_while_saving without --save: expected --save FILE");
  }
}

// read_run_flags: --lr_schedule and its flags, --epochs, --augment, the evaluation's and
// --progress (after --lr and --dtp). The cosine schedule's length, and --epochs'
// iterations, are settled in open_input, where the data set's size is known.
void read_run_flags(Flags& f) {
  optim::LrSchedule& s = f.schedule;
  s.kind = value_or_exit(optim::parse_schedule_kind(absl::GetFlag(FLAGS_lr_schedule)), "--lr_schedule: ");
  s.base = static_cast<float>(f.lr);
  s.warmup = value_or_exit(int_flag("lr_warmup", absl::GetFlag(FLAGS_lr_warmup), 0));
  s.step_size = value_or_exit(int_flag("lr_step", absl::GetFlag(FLAGS_lr_step), 0));
  s.gamma = static_cast<float>(value_or_exit(real_flag("lr_gamma", absl::GetFlag(FLAGS_lr_gamma))));
  s.min = static_cast<float>(value_or_exit(real_flag("lr_min", absl::GetFlag(FLAGS_lr_min))));
  const char* kinds[] = {"constant", "step", "cosine"};
  for (auto [flag, kind] : {std::pair{"lr_step", optim::LrSchedule::Kind::kStep},
                            std::pair{"lr_gamma", optim::LrSchedule::Kind::kStep},
                            std::pair{"lr_min", optim::LrSchedule::Kind::kCosine}}) {
    if (cli::given(flag) && s.kind != kind) {
      fail(kBadValue, absl::StrCat("--", flag, " with --lr_schedule ", kinds[static_cast<int>(s.kind)],
                                   ": it sets the ", kinds[static_cast<int>(kind)], " schedule; expected --lr_schedule ",
                                   kinds[static_cast<int>(kind)]));
    }
  }
  if (s.kind == optim::LrSchedule::Kind::kStep && s.step_size < 1) {
    fail(kBadValue, "--lr_schedule step without --lr_step: expected the iterations between decays, >= 1");
  }
  const std::string epochs = absl::GetFlag(FLAGS_epochs).text;
  if (!absl::SimpleAtod(epochs, &f.epochs) || !(f.epochs >= 0) || !std::isfinite(f.epochs)) {
    fail(kBadValue, absl::StrCat("--epochs '", epochs, "': expected a number of passes >= 0"));
  }
  if (f.epochs > 0 && cli::given("iterations")) {
    fail(kBadValue, "--epochs with --iterations: each sets the run's length; expected one of them");
  }
  f.augment = absl::GetFlag(FLAGS_augment);
  const std::string progress = absl::GetFlag(FLAGS_progress);
  if (progress != "auto" && progress != "plain") {
    fail(kBadValue, absl::StrCat("--progress '", progress, "': expected auto or plain"));
  }
  // Not under a launcher: mpirun hands its ranks pseudo-terminals whatever its own output
  // is (a file, a pipe), so a rank's isatty says nothing about the user's screen.
  f.live_progress = progress == "auto" && g_world.launcher == "none" && ::isatty(STDOUT_FILENO) == 1;
  f.eval_every = static_cast<int>(value_or_exit(int_flag("eval_every", absl::GetFlag(FLAGS_eval_every), 0)));
  f.eval_batches = static_cast<int>(value_or_exit(int_flag("eval_batches", absl::GetFlag(FLAGS_eval_batches), 0)));
  f.eval_data = absl::GetFlag(FLAGS_eval_data);
  for (const char* name : {"eval_data", "eval_batches"}) {
    if (cli::given(name) && f.eval_every == 0) {
      fail(kBadValue, absl::StrCat("--", name, " without --eval_every: expected --eval_every N"));
    }
  }
  if (f.eval_every > 0 && f.any_dtp()) {
    fail(kBadValue, "--eval_every with --dtp: evaluation runs data parallel only so far; expected no --dtp");
  }
}

Flags read_flags() {
  Flags f;
  f.model = absl::GetFlag(FLAGS_model);
  const std::vector<std::string> names = models::model_names();
  if (std::find(names.begin(), names.end(), f.model) == names.end()) {
    fail(kBadValue, absl::StrCat("--model '", f.model, "': expected one of ", absl::StrJoin(names, ", ")));
  }
  f.batch = value_or_exit(int_flag("batch", absl::GetFlag(FLAGS_batch), 1));
  f.iterations = value_or_exit(int_flag("iterations", absl::GetFlag(FLAGS_iterations), 1));
  f.lr = value_or_exit(real_flag("lr", absl::GetFlag(FLAGS_lr)));
  f.momentum = value_or_exit(real_flag("momentum", absl::GetFlag(FLAGS_momentum)));
  f.weight_decay = value_or_exit(real_flag("weight_decay", absl::GetFlag(FLAGS_weight_decay)));
  f.adam_eps = value_or_exit(real_flag("adam_eps", absl::GetFlag(FLAGS_adam_eps)));
  if (!(f.adam_eps > 0)) fail(kBadValue, absl::StrCat("--adam_eps ", f.adam_eps, ": expected > 0"));
  f.optimizer = absl::GetFlag(FLAGS_optimizer);
  if (f.optimizer != "sgd" && f.optimizer != "adamw") {
    fail(kBadValue, absl::StrCat("--optimizer '", f.optimizer, "': expected sgd or adamw"));
  }
  if (f.optimizer == "sgd" && cli::given("adam_eps")) {
    fail(kBadValue, "--adam_eps with --optimizer sgd: expected --adam_eps only with adamw");
  }
  if (f.optimizer == "adamw" && cli::given("momentum")) {
    fail(kBadValue, "--momentum with --optimizer adamw: AdamW has no momentum setting (its moments use betas 0.9 "
                    "and 0.999); expected --momentum only with sgd");
  }
  const std::string seed = absl::GetFlag(FLAGS_seed).text;
  if (!absl::SimpleAtoi(seed, &f.seed))
    fail(kBadValue, absl::StrCat("--seed '", seed, "': expected a whole number >= 0"));
  f.data = absl::GetFlag(FLAGS_data);
  f.overfit_batches =
      static_cast<int>(value_or_exit(int_flag("overfit_batches", absl::GetFlag(FLAGS_overfit_batches), 0, 1 << 20)));
  f.threads = value_or_exit(int_flag("threads", absl::GetFlag(FLAGS_threads), 0, 4096));
  const FlagText image_size = absl::GetFlag(FLAGS_image_size);
  f.image_size = image_size.text == "auto" ? 0 : value_or_exit(int_flag("image_size", image_size, 1, 4096));
  f.num_classes = value_or_exit(int_flag("num_classes", absl::GetFlag(FLAGS_num_classes), 1, 1 << 24));
  f.log_every = value_or_exit(int_flag("log_every", absl::GetFlag(FLAGS_log_every), 1));
  f.warmup = value_or_exit(int_flag("warmup", absl::GetFlag(FLAGS_warmup), 0));
  read_gpt_flags(f);
  read_spos_flags(f);
  read_moe_flags(f);

  RuntimeOptions& r = f.runtime;
  r.device = absl::GetFlag(FLAGS_device);
  if (r.device != "cpu" && r.device != "cuda") {
    fail(kBadValue, absl::StrCat("--device '", r.device, "': expected cpu or cuda"));
  }
  r.memory_bytes = value_or_exit(bytes_flag("memory", absl::GetFlag(FLAGS_memory)));
  r.comm_bytes = value_or_exit(bytes_flag("comm_memory", absl::GetFlag(FLAGS_comm_memory)));
  if (r.memory_bytes != 0 && r.comm_bytes >= r.memory_bytes) {
    fail(kBadValue,
         absl::StrCat("--comm_memory ", absl::GetFlag(FLAGS_comm_memory), " leaves nothing of --memory ",
                      absl::GetFlag(FLAGS_memory), " for the compute region: expected less than --memory"));
  }
  r.evict.policy = value_or_exit(parse_evict_policy(absl::GetFlag(FLAGS_evict_policy)));
  r.evict.mode = value_or_exit(parse_evict_mode(absl::GetFlag(FLAGS_evict_mode)));
  const Budget budget = value_or_exit(parse_budget(absl::GetFlag(FLAGS_budget)), "--budget: ");
  if (budget.kind == Budget::Kind::kPeakShare) {
    fail(kBadValue, absl::StrCat("--budget '", budget.text,
                                 "': mtc-train does not know the peak before it runs; expected bytes (300MiB) or a "
                                 "percentage of the compute region (30%), or mtc-replay for shares of the peak"));
  }
  if (budget.kind == Budget::Kind::kBytes) r.evict.budget_bytes = budget.bytes;
  if (budget.kind == Budget::Kind::kRegionShare) r.budget_fraction = budget.share;
  if (budget.kind != Budget::Kind::kNone && r.evict.policy == EvictPolicy::kNone) {
    fail(kBadValue, absl::StrCat("--budget ", budget.text, " with --evict_policy none: nothing would be evicted to "
                                 "keep to it; expected an eviction policy (mtc) or no --budget"));
  }
  if (const std::string metrics = absl::GetFlag(FLAGS_metrics); !metrics.empty()) {
    f.metrics = launch::per_rank_path(metrics, g_world);
    for (const std::string& p : {metrics, f.metrics}) {
      if (absl::Status s = cli::check_output_file("metrics", p); !s.ok()) fail(kBadValue, std::string(s.message()));
    }
  }
  if (const std::string chrome = absl::GetFlag(FLAGS_chrome_trace); !chrome.empty()) {
    r.chrome_trace_path = launch::per_rank_path(chrome, g_world);
    r.chrome_trace_pid = g_world.rank;
    for (const std::string& p : {chrome, r.chrome_trace_path}) {
      if (absl::Status s = cli::check_output_file("chrome_trace", p); !s.ok()) fail(kBadValue, std::string(s.message()));
    }
  }
  if (const std::string trace = absl::GetFlag(FLAGS_record_trace); !trace.empty()) {
    // The name as given and this rank's file: a directory given is refused, not turned
    // into the sibling file DIR.rank<R>.
    r.trace_path = launch::per_rank_path(trace, g_world);
    for (const std::string& p : {trace, r.trace_path}) {
      if (absl::Status s = cli::check_output_file("record_trace", p); !s.ok()) fail(kBadValue, std::string(s.message()));
    }
  }
  r.tma.enabled = absl::GetFlag(FLAGS_tma);
  r.tma.warmup_iterations = value_or_exit(int_flag("tma_warmup", absl::GetFlag(FLAGS_tma_warmup), 1));
  r.tma.plan_time_limit_sec = value_or_exit(real_flag("tma_time_limit", absl::GetFlag(FLAGS_tma_time_limit)));
  if (!(r.tma.plan_time_limit_sec > 0)) {
    fail(kBadValue, absl::StrCat("--tma_time_limit '", absl::GetFlag(FLAGS_tma_time_limit).text,
                                 "': expected a number of seconds > 0"));
  }
  // Settings that only matter with another flag: refused without it, not ignored.
  r.tma.max_plans = static_cast<int>(value_or_exit(int_flag("tma_max_plans", absl::GetFlag(FLAGS_tma_max_plans), 1)));
  for (const char* name : {"tma_warmup", "tma_time_limit", "tma_max_plans", "tma_problem"}) {
    if (!r.tma.enabled && cli::given(name)) {
      fail(kBadValue, absl::StrCat("--", name, " without --tma: it sets TMA, which is off; expected --tma too"));
    }
  }
  if (const std::string p = absl::GetFlag(FLAGS_tma_problem); !p.empty()) {
    r.tma.problem_path = launch::per_rank_path(p, g_world);
    for (const std::string& q : {p, r.tma.problem_path}) {
      if (absl::Status s = cli::check_output_file("tma_problem", q); !s.ok()) fail(kBadValue, std::string(s.message()));
    }
  }
  r.evict.tune = absl::GetFlag(FLAGS_dte_tune);
  if (r.evict.policy != EvictPolicy::kMtc && cli::given("dte_tune")) {
    fail(kBadValue, absl::StrCat("--dte_tune with --evict_policy ", evict_policy_name(r.evict.policy),
                                 ": it tunes policy mtc's score; expected --evict_policy mtc"));
  }
  for (const char* name : {"evict_mode", "max_recomputes_per_op"}) {
    if (r.evict.policy == EvictPolicy::kNone && cli::given(name)) {
      fail(kBadValue, absl::StrCat("--", name, " with --evict_policy none: nothing is evicted; expected an eviction "
                                   "policy (mtc)"));
    }
  }
  r.evict.max_recomputes_per_op =
      static_cast<uint32_t>(value_or_exit(int_flag("max_recomputes_per_op", absl::GetFlag(FLAGS_max_recomputes_per_op), 0)));
  // Default threads: the cores divided among the ranks on this machine (default_threads),
  // and no more than the cores that are idle now: with another process keeping one of 2
  // cores busy, ResNet-56 ran 1.6x faster on one thread than on two (docs/cpu.md).
  if (f.threads == 0 && r.device == "cpu" && std::getenv("OMP_NUM_THREADS") == nullptr) {
    const int cores = default_threads(1), share = default_threads(g_world.local_size);
    const int idle = idle_cores(0.1);
    f.threads = idle < 0 ? share : std::clamp(idle / g_world.local_size, 1, share);
    if (f.threads < share) {
      out("note: %d of the %d cores this process may use were busy at start-up: %d kernel thread%s instead of %d "
          "(--threads sets it)\n",
          cores - idle, cores, f.threads, f.threads == 1 ? "" : "s", share);
    }
  }
  r.num_threads = f.threads;
  r.synchronous = absl::GetFlag(FLAGS_sync);
  r.seed = f.seed;

  f.comm_backend = absl::GetFlag(FLAGS_comm_backend);
  if (f.comm_backend != "auto" && f.comm_backend != "local" && f.comm_backend != "mpi" && f.comm_backend != "nccl") {
    fail(kBadValue, absl::StrCat("--comm_backend '", f.comm_backend, "': expected auto, local, mpi or nccl"));
  }
  f.sync_bn = absl::GetFlag(FLAGS_sync_bn);
  f.comm_check = absl::GetFlag(FLAGS_comm_check);
  if (absl::GetFlag(FLAGS_dtp) == "auto") {
    f.dtp_auto = true;
  } else if (absl::StatusOr<dtp::Mode> m = dtp::parse_mode(absl::GetFlag(FLAGS_dtp)); m.ok()) {
    f.dtp = *m;
  } else {
    fail(kBadValue, absl::StrCat("--dtp ", m.status().message(), ", or auto"));
  }
  const bool any_dtp = f.any_dtp();
  f.dtp_lambda = value_or_exit(real_flag("dtp_lambda", absl::GetFlag(FLAGS_dtp_lambda)));
  if (!(f.dtp_lambda >= 0 && f.dtp_lambda <= 1)) {
    fail(kBadValue, absl::StrCat("--dtp_lambda ", f.dtp_lambda, ": expected a number in [0, 1]"));
  }
  f.dtp_state_share = value_or_exit(real_flag("dtp_state_share", absl::GetFlag(FLAGS_dtp_state_share)));
  if (!(f.dtp_state_share > 0 && f.dtp_state_share <= 1)) {
    fail(kBadValue, absl::StrCat("--dtp_state_share ", f.dtp_state_share, ": expected a number in (0, 1]"));
  }
  f.dtp_report = absl::GetFlag(FLAGS_dtp_report);
  f.dtp_comm = absl::GetFlag(FLAGS_dtp_comm);
  if ((f.dtp_report || !f.dtp_comm.empty()) && !any_dtp) {
    fail(kBadValue, absl::StrCat(f.dtp_report ? "--dtp_report" : "--dtp_comm",
                                 " without --dtp: expected --dtp=auto or p1..p4"));
  }
  if (!f.dtp_comm.empty()) {  // read and checked before anything starts
    std::ifstream in(f.dtp_comm);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) fail(kBadValue, absl::StrCat("--dtp_comm ", f.dtp_comm, ": cannot read the file"));
    f.dtp_comm_text = text.str();
    if (auto m = partition::CollectiveModel::from_bench_json(f.dtp_comm_text, partition::CollectiveModel{}); !m.ok()) {
      fail(kBadValue, absl::StrCat("--dtp_comm ", f.dtp_comm, ": ", m.status().message()));
    }
  }
  f.dtp_warmup = value_or_exit(int_flag("dtp_warmup", absl::GetFlag(FLAGS_dtp_warmup), 2));
  if (cli::given("dtp_warmup") && !any_dtp) fail(kBadValue, "--dtp_warmup without --dtp: expected --dtp=auto or p1..p4");
  f.dtp_group = value_or_exit(int_flag("dtp_group", absl::GetFlag(FLAGS_dtp_group), 0));
  if (cli::given("dtp_group") && !any_dtp) fail(kBadValue, "--dtp_group without --dtp: expected --dtp=auto or p1..p4");
  if (f.dtp_group == 0) f.dtp_group = g_world.size;
  if (any_dtp && g_world.size % f.dtp_group != 0) {
    fail(kBadValue, absl::StrCat("--dtp_group=", f.dtp_group, ": expected a divisor of the ", g_world.size, " ranks"));
  }
  if (cli::given("dtp_lambda") && !f.dtp_auto) fail(kBadValue, "--dtp_lambda without --dtp=auto: expected --dtp=auto");
  if (cli::given("dtp_state_share") &&
      !(f.dtp_auto && (f.runtime.evict.budget_bytes > 0 || f.runtime.budget_fraction > 0))) {
    fail(kBadValue, "--dtp_state_share without --dtp=auto and a --budget: expected both");
  }
  if (any_dtp && f.sync_bn && f.dtp_group != g_world.size) {
    fail(kBadValue, absl::StrCat("--sync_bn with --dtp_group=", f.dtp_group, " of ", g_world.size,
                                 " ranks: batch norm's statistics over the whole batch need one group; expected "
                                 "--dtp_group=0 (every rank in one group), or each rank's own statistics "
                                 "(no --sync_bn)"));
  }
  f.allow_nonfinite = absl::GetFlag(FLAGS_allow_nonfinite);
  f.bucket_bytes = value_or_exit(bytes_flag("bucket_size", absl::GetFlag(FLAGS_bucket_size)));
  if (f.bucket_bytes == 0) fail(kBadValue, "--bucket_size 'auto': expected a size > 0 such as 2MiB");
  f.fail_rank = value_or_exit(int_flag("fail_rank", absl::GetFlag(FLAGS_fail_rank), -1));
  f.fail_iteration = value_or_exit(int_flag("fail_iteration", absl::GetFlag(FLAGS_fail_iteration), 1));
  f.fail_mode = absl::GetFlag(FLAGS_fail_mode);
  if (f.fail_mode != "error" && f.fail_mode != "exception" && f.fail_mode != "kill" &&
      f.fail_mode != "kill_while_saving") {
    fail(kBadValue,
         absl::StrCat("--fail_mode '", f.fail_mode, "': expected error, exception, kill or kill_while_saving"));
  }
  read_run_flags(f);
  read_checkpoint_flags(f);
  if (f.batch % g_world.size != 0) {
    fail(kBadValue, absl::StrCat("--batch ", f.batch, " on ", g_world.size,
                                 " ranks: expected a multiple of the number of ranks (the global batch is split "
                                 "evenly over them)"));
  }
  if (f.model == "moe_gpt") {  // the tokens one forward routes: the rank's rows, or under DTP the whole batch
    const bool dtp = f.any_dtp();
    if (f.moe_expert_parallel && (dtp || f.moe.bucket > 0 || f.moe.experts % g_world.size != 0)) {
      fail(kBadValue, absl::StrCat("--moe_expert_parallel with ",
                                   dtp ? "--dtp: DTP splits the ops itself; expected one of them"
                                   : f.moe.bucket > 0
                                       ? "--moe_bucket: the exchange sends the exact counts; expected no --moe_bucket"
                                       : absl::StrCat(f.moe.experts, " experts on ", g_world.size,
                                                      " ranks: expected --moe_experts a multiple of the ranks")));
    }
    const int64_t tokens = (dtp ? f.batch : f.batch / g_world.size) * f.gpt.seq;
    if (tokens % f.moe.groups != 0) {
      fail(kBadValue, absl::StrCat("--moe_groups ", f.moe.groups, ": a forward routes ", tokens, " tokens (",
                                   dtp ? "--batch" : "the rank's share of --batch", " times --seq ", f.gpt.seq,
                                   "): expected groups that divide them"));
    }
  }
  // GPUs: the local rank picks one of the visible devices (launch/world.h). The ranks on
  // this machine share its memory and cores (CPU), or a GPU when there are more ranks
  // than GPUs: auto sizes and default threads are divided among them.
  r.memory_share = g_world.local_size;
  if (r.device == "cuda") {
    const int gpus = visible_gpus();
    r.device_ordinal = launch::device_for(g_world, gpus);
    r.memory_share = gpus > 0 ? (g_world.local_size + gpus - 1) / gpus : 1;
  }
  return f;
}

// make_communicator: the ranks' communicator, or null when this rank is alone and
// nothing needs one (the single-device fallback).
dist::CommPtr make_communicator(const Flags& f) {
  if (g_world.size == 1 && !f.sync_bn && f.comm_backend == "auto") return nullptr;
  if (g_world.size > 1 && !comm::mpi_initialized()) {
    fail(kBadValue, absl::StrCat(g_world.size, " ranks from ", g_world.launcher,
                                 "'s environment, but mtc's ranks connect through MPI (NCCL's bootstrap too), "
                                 "which was not started: expected a start by mpirun -np ", g_world.size));
  }
  comm::CommOptions o;
  o.device_ordinal = f.runtime.device_ordinal;
  o.check_arguments = f.comm_check;
  const std::string b = f.comm_backend != "auto" ? f.comm_backend
                        : f.runtime.device == "cuda" ? "nccl"
                        : g_world.size > 1           ? "mpi"
                                                     : "local";
  o.backend = b == "nccl" ? comm::Backend::kNccl : b == "mpi" ? comm::Backend::kMpi : comm::Backend::kLocal;
  absl::StatusOr<std::shared_ptr<comm::Communicator>> c = comm::create(o);
  if (!c.ok()) fail(kBadValue, absl::StrCat("--comm_backend ", b, ": ", c.status().message()));
  if ((*c)->world_size() != g_world.size || (*c)->rank() != g_world.rank) {
    fail(kFailure, absl::StrCat("the ", b, " communicator has rank ", (*c)->rank(), " of ", (*c)->world_size(),
                                ", the launcher's environment says ", launch::describe(g_world)));
  }
  return *c;
}

// rank_rows: this rank's share of a global host batch, rows [rank * n, (rank + 1) * n).
data::HostBatch rank_rows(data::HostBatch global) {
  if (g_world.size == 1) return global;
  const int64_t n = global.size() / g_world.size;
  return global.rows(g_world.rank * n, n);
}

// inject_failure: --fail_rank's failure, for the tests of how the other ranks stop.
void inject_failure(const Flags& f, int it) {
  if (g_world.rank != f.fail_rank || it != f.fail_iteration || f.fail_mode == "kill_while_saving") return;
  if (f.fail_mode == "kill") std::raise(SIGKILL);
  if (f.fail_mode == "exception") throw std::runtime_error(absl::StrCat("injected exception at iteration ", it));
  fail(kFailure, absl::StrCat("iteration ", it, ": injected failure (--fail_rank ", f.fail_rank, ")"));
}

// RankMemory: one rank's region figures, gathered for the summary.
struct RankMemory {
  size_t m1_capacity, m1_allocated, m1_peak, m2_capacity, m2_peak, m2_high_water;
};

// gather_memory: every rank's figures, in rank order (this rank's alone without ranks).
std::vector<RankMemory> gather_memory(const MemoryStats& m, const dist::CommPtr& c) {
  const size_t mine[6] = {m.comm.capacity,    m.comm.allocated,        m.comm.peak_allocated,
                          m.compute.capacity, m.compute.peak_allocated, m.compute.high_water};
  std::vector<size_t> all(std::begin(mine), std::end(mine));
  if (c != nullptr && c->world_size() > 1) {
    // Each size as two i32 halves of 30 bits: exact up to 2^60 bytes.
    std::vector<int32_t> halves;
    for (size_t v : mine) {
      halves.push_back(static_cast<int32_t>(v >> 30));
      halves.push_back(static_cast<int32_t>(v & ((size_t{1} << 30) - 1)));
    }
    Tensor t = from_vector_i32({1, static_cast<int64_t>(halves.size())}, halves);
    absl::StatusOr<std::vector<int32_t>> g = dist::all_gather(t, c).to_vector_i32();
    if (!g.ok()) fail(kFailure, absl::StrCat("gathering the ranks' memory figures: ", g.status().message()));
    all.clear();
    for (size_t i = 0; i + 1 < g->size(); i += 2) {
      all.push_back((static_cast<size_t>((*g)[i]) << 30) | static_cast<size_t>((*g)[i + 1]));
    }
  }
  std::vector<RankMemory> r;
  for (size_t i = 0; i + 5 < all.size(); i += 6) {
    r.push_back({all[i], all[i + 1], all[i + 2], all[i + 3], all[i + 4], all[i + 5]});
  }
  return r;
}

// Input: the data source and the shape of one sample, opened before the ranks connect,
// the arena is taken or the model built: a path that cannot be read is a flag error,
// reported once (by rank 0) and before anything is written.
struct Input {
  std::unique_ptr<data::DataSource> data;
  Shape sample_shape;
  // --resume: the checkpoint, read and checked, and the figures of its metadata the run
  // goes on from. Its tensors are dropped once restored (they may be gigabytes).
  struct Resume {
    checkpoint::SafetensorsFile file;
    int iteration = 0;           // saved after this iteration
    int64_t data_position = 0;   // DataSource::position() then
    uint64_t seed_counter = 0;   // Runtime::seed_counter() then
  };
  std::optional<Resume> resume;
  std::optional<checkpoint::SafetensorsFile> weights;  // --weights' file, read; dropped once loaded
  std::unique_ptr<data::DataSource> eval;               // --eval_every's held-out data
};

// metadata_int: a whole-number entry of a checkpoint's metadata, or a flag error.
int64_t metadata_int(const Flags& f, const checkpoint::SafetensorsFile& c, const std::string& key) {
  auto it = c.metadata.find(key);
  int64_t v = 0;
  if (it == c.metadata.end() || !absl::SimpleAtoi(it->second, &v)) {
    fail(kBadValue, absl::StrCat("--resume '", f.resume, "': its metadata has no whole number '", key,
                                 "': expected a checkpoint mtc-train saved"));
  }
  return v;
}

// read_resume: the checkpoint of --resume, checked against the flags before anything
// starts: mtc-train's format, the same model, and iterations left to train.
void read_resume(const Flags& f, Input& in) {
  absl::StatusOr<checkpoint::SafetensorsFile> c = checkpoint::read_checkpoint(f.resume);
  if (!c.ok()) fail(kBadValue, "--resume: " + std::string(c.status().message()));
  auto meta = [&](const std::string& key) {
    auto it = c->metadata.find(key);
    return it == c->metadata.end() ? std::string() : it->second;
  };
  if (meta("format") != checkpoint::kFormat) {
    fail(kBadValue, absl::StrCat("--resume '", f.resume, "': format '", meta("format"), "': expected '",
                                 checkpoint::kFormat, "', a checkpoint mtc-train saved"));
  }
  if (meta("model") != f.model) {
    fail(kBadValue, absl::StrCat("--resume '", f.resume, "': a checkpoint of model ", meta("model"),
                                 ", and --model is ", f.model, ": expected the same model"));
  }
  const int64_t it = metadata_int(f, *c, "iteration");
  const int total = f.warmup + f.iterations;
  if (it < 1 || it >= total) {
    fail(kBadValue, absl::StrCat("--resume '", f.resume, "': saved at iteration ", it, ", and --warmup + --iterations is ",
                                 total, ": expected more iterations than the checkpoint has run"));
  }
  const int64_t position = metadata_int(f, *c, "data_position"), seeds = metadata_int(f, *c, "rng.runtime");
  in.resume = Input::Resume{std::move(*c), static_cast<int>(it), position, static_cast<uint64_t>(seeds)};
}

// open_eval: --eval_every's held-out data: a CIFAR-10 file (the training folder's
// test_batch.bin by default), or synthetic batches from another seed than training's.
void open_eval(Flags& f, bool cifar, Input& in) {
  std::string spec = f.eval_data;
  if (spec.empty()) {
    if (cifar) {
      const std::string dir = f.data.substr(8);
      std::error_code ec;
      if (!std::filesystem::is_directory(dir, ec)) {
        fail(kBadValue, absl::StrCat("--eval_every with --data ", f.data, ", a file: expected --eval_data cifar10:PATH ",
                                     "(with a folder, its test_batch.bin is the default)"));
      }
      spec = "cifar10:" + (std::filesystem::path(dir) / "test_batch.bin").string();
    } else {
      spec = "synthetic";
    }
  }
  const bool eval_cifar = absl::StartsWith(spec, "cifar10:");
  if (eval_cifar != cifar) {
    fail(kBadValue, absl::StrCat("--eval_data ", spec, " with --data ", f.data,
                                 ": expected held-out data of the training data's kind"));
  }
  const uint64_t seed = f.seed + 0x65766c;  // "evl": apart from the training batches
  in.eval = models::is_language_model(f.model)
                ? value_or_exit(data::open_token_data(spec, f.gpt.seq, f.gpt.vocab, seed), "--eval_data: ")
                : value_or_exit(data::open_data(spec, in.sample_shape, f.num_classes, seed, /*shuffle=*/false),
                                "--eval_data: ");
  if (f.eval_batches == 0) {
    f.eval_batches = eval_cifar ? static_cast<int>((static_cast<data::Cifar10&>(*in.eval).size() + f.batch - 1) / f.batch)
                                : 10;
  }
}

Input open_input(Flags& f) {
  // CIFAR-10 images are 32x32 whatever the model.
  const bool cifar = absl::StartsWith(f.data, "cifar10:");
  if (cifar && f.image_size != 0 && f.image_size != 32) {
    fail(kBadValue, absl::StrCat("--image_size ", f.image_size, " with CIFAR-10 data, whose images are 32x32: "
                                 "expected 32 or no --image_size"));
  }
  models::ModelOptions mo;
  mo.num_classes = f.num_classes;
  mo.image_size = cifar ? 32 : f.image_size;
  mo.gpt = f.gpt;
  mo.moe = f.moe;
  Input in;
  in.sample_shape = value_or_exit(models::input_shape(f.model, mo), "--model " + f.model + ": ");
  in.data = models::is_language_model(f.model)
                ? value_or_exit(data::open_token_data(f.data, f.gpt.seq, f.gpt.vocab, f.seed), "--data: ")
                : value_or_exit(data::open_data(f.data, in.sample_shape, f.num_classes, f.seed, /*shuffle=*/true),
                                "--data: ");
  if (cifar && f.num_classes != in.data->num_classes()) {
    fail(kBadValue, absl::StrCat("--num_classes ", f.num_classes, " with CIFAR-10 data: expected 10"));
  }
  if ((f.epochs > 0 || f.augment) && !cifar) {
    fail(kBadValue, absl::StrCat(f.epochs > 0 ? "--epochs" : "--augment", " with --data ", f.data,
                                 ": expected a real dataset, --data cifar10:PATH"));
  }
  if (f.augment) static_cast<data::Cifar10&>(*in.data).set_augment(true);
  if (f.epochs > 0) {
    const int64_t records = static_cast<data::Cifar10&>(*in.data).size();
    const int64_t total = static_cast<int64_t>(std::ceil(f.epochs * static_cast<double>(records) / f.batch));
    if (total - f.warmup < 1 || total > (int64_t{1} << 30)) {
      fail(kBadValue, absl::StrCat("--epochs ", f.epochs, " of ", records, " records at --batch ", f.batch, " is ",
                                   total, " iterations, with --warmup ", f.warmup,
                                   ": expected at least one iteration after the warm-up"));
    }
    f.iterations = static_cast<int>(total - f.warmup);
  }
  f.schedule.total = f.warmup + f.iterations;
  if (absl::Status s = f.schedule.check(); !s.ok()) fail(kBadValue, absl::StrCat("--lr_schedule: ", s.message()));
  if (f.eval_every > 0) open_eval(f, cifar, in);
  if (f.overfit_batches > 0) in.data = std::make_unique<data::RepeatBatches>(std::move(in.data), f.overfit_batches);
  if (!f.resume.empty()) read_resume(f, in);
  if (!f.weights.empty()) {
    absl::StatusOr<checkpoint::SafetensorsFile> w = checkpoint::read_checkpoint(f.weights);
    if (!w.ok()) fail(kBadValue, "--weights: " + std::string(w.status().message()));
    in.weights = std::move(*w);
  }
  return in;
}

int run(const Flags& f, Input input) {
  std::unique_ptr<data::DataSource>& data = input.data;
  auto runtime = Runtime::create(f.runtime);
  if (!runtime.ok()) fail(kBadValue, std::string(runtime.status().message()));
  Runtime& rt = **runtime;
  if (!f.runtime.trace_path.empty()) g_pending_trace = f.runtime.trace_path + ".partial";
  if (!f.runtime.chrome_trace_path.empty()) g_pending_chrome = f.runtime.chrome_trace_path + ".partial";
  out("device: %s%s\n", rt.device().describe().c_str(),
              f.runtime.synchronous ? ", synchronous interpreter" : "");
  if (rt.budget_bytes() > 0) {
    out("budget: m* %s (%zu bytes) of the compute region's %s, policy %s, mode %s\n",
        alloc::format_bytes(rt.budget_bytes()).c_str(), rt.budget_bytes(),
        alloc::format_bytes(rt.device().compute_region().capacity()).c_str(),
        evict_policy_name(f.runtime.evict.policy), evict_mode_name(f.runtime.evict.mode));
  }
  const dist::CommPtr comm = make_communicator(f);
  const int per_rank = f.batch / g_world.size;
  if (comm != nullptr) {
    out("ranks: %d (%s), %s communicator, %d samples per rank%s\n", g_world.size, g_world.launcher.c_str(),
        comm::backend_name(comm->backend()), per_rank, f.sync_bn ? ", synchronised batch norm" : "");
  }

  models::ModelOptions mo;
  mo.num_classes = f.num_classes;
  if (input.sample_shape.size() == 3) mo.image_size = static_cast<int>(input.sample_shape[1]);
  mo.gpt = f.gpt;
  mo.moe = f.moe;
  if (f.moe_expert_parallel) mo.moe_ep = comm;
  models::Model model = value_or_exit(models::make_model(f.model, mo));
  const int64_t n_params = model.net->num_parameters();
  if (absl::Status s = rt.interpreter().sync(); !s.ok()) {
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      fail(kBadValue, absl::StrCat("--memory ", absl::GetFlag(FLAGS_memory), " is too small for the ",
                                   n_params, " parameters of ", f.model, " (", mib(n_params * sizeof(float)),
                                   "): expected a larger arena; ", s.message()));
    }
    fail(kFailure, absl::StrCat("creating ", f.model, ": ", s.message()));
  }
  if (input.weights) {  // every rank loads the same file: no broadcast needed
    if (absl::Status s = checkpoint::restore(f.weights, *input.weights, *model.net, nullptr); !s.ok()) {
      fail(kBadValue, "--weights: " + std::string(s.message()));
    }
    out("weights: %zu tensors from %s\n", input.weights->tensors.size(), f.weights.c_str());
    input.weights.reset();
  }
  // SPOS: a fixed path, or a sampler seeded alike on every rank; an empty FLOPs range is
  // refused before training.
  auto* spos = dynamic_cast<models::SposSupernet*>(model.net.get());
  std::optional<models::SposSampler> spos_sampler;
  std::vector<std::vector<int>> spos_pool;  // --spos_pool's paths, drawn once
  std::optional<data::Rng> spos_pick;       // which of them each iteration runs
  std::string spos_what;
  if (spos != nullptr) {
    if (!f.spos_path.empty()) {
      if (absl::Status s = spos->set_path(f.spos_path); !s.ok()) fail(kBadValue, std::string(s.message()));
      spos_what = absl::StrCat(" (path fixed: ", absl::StrJoin(f.spos_path, ","), ")");
    } else {
      const uint64_t seed = f.seed * 0x9e3779b97f4a7c15ULL + 0x5b05;  // apart from the data's and the weights'
      spos_sampler.emplace(seed, spos, f.spos_min_flops, f.spos_max_flops);
      if (absl::Status s = models::SposSampler(*spos_sampler).next().status(); !s.ok()) {  // a copy: no draw taken
        fail(kBadValue, absl::StrCat("--spos_flops: ", s.message()));
      }
      if (f.spos_pool > 0) {
        for (int i = 0; i < f.spos_pool; ++i) spos_pool.push_back(value_or_exit(spos_sampler->next(), "--spos_pool: "));
        spos_pick.emplace(seed + 1);
      }
      spos_what = absl::StrCat(
          " (a path per iteration, uniform", f.spos_pool > 0 ? absl::StrCat(" among ", f.spos_pool, " drawn") : "",
          f.spos_max_flops > 0
              ? absl::StrFormat(" within %.1f-%.1fM multiply-adds", f.spos_min_flops * 1e-6, f.spos_max_flops * 1e-6)
              : "",
          ")");
    }
  }
  auto* moe_gpt = f.model == "moe_gpt" ? dynamic_cast<models::Gpt*>(model.net.get()) : nullptr;
  const std::string moe_what =
      moe_gpt != nullptr ? absl::StrCat(", MoE: ", moe_gpt->moe.describe(), " in ", moe_gpt->moe_blocks().size(),
                                        " of ", f.gpt.layers, " blocks",
                                        f.moe_expert_parallel && g_world.size > 1
                                            ? absl::StrCat(", experts spread over ", g_world.size, " ranks")
                                            : "")
                         : "";
  out("model: %s%s%s, %lld parameters (%s), input %s, %d classes\n", f.model.c_str(), spos_what.c_str(),
      models::is_language_model(f.model)
          ? (" (" + models::describe_language_model(f.model, f.gpt) + moe_what + ")").c_str()
          : "",
      static_cast<long long>(n_params), mib(n_params * sizeof(float)).c_str(), shape_str(model.sample_shape).c_str(),
      data->num_classes());

  if (g_world.size == 1 && cli::given("bucket_size")) {
    out("note: --bucket_size has no effect on one rank: there is no gradient all-reduce to bucket\n");
  }
  // --sync_bn: data parallel swaps its batch norms for synchronised ones; DTP keeps them
  // and its dispatch combines the statistics of a split batch (BatchNormOp::shard_run).
  if (f.sync_bn && !f.any_dtp()) dist::convert_sync_batch_norm(*model.net, comm);
  const dtp::BatchNormStats bn_stats = f.sync_bn ? dtp::BatchNormStats::kBatch : dtp::BatchNormStats::kShard;
  std::unique_ptr<dist::DataParallel> dp;
  dtp::Group group;  // DTP's partition group: every rank, or --dtp_group's
  dtp::Mesh mesh;    // the groups, and data parallel across them
  std::unique_ptr<dtp::GradReducer> reducer;
  if (f.any_dtp()) {
    if (comm != nullptr) {
      mesh = value_or_exit(dtp::make_mesh(comm, f.dtp_group, f.comm_check, bn_stats));
    } else {
      mesh.group = dtp::make_group(nullptr, f.comm_check, bn_stats);
    }
    group = mesh.group;
    // The planner's settings: the rank's memory (the DTE budget, else the compute region,
    // with the comm region the gradients go to), the optimizer's state per parameter, and
    // the collectives' model (the backend's defaults, or mtc-bench-comm's fit).
    dtp::AutoOptions ao;
    ao.choose = f.dtp_auto;
    ao.lambda = f.dtp_lambda;
    ao.report = f.dtp_report;
    ao.warmup_iterations = f.dtp_warmup;
    // Without eviction nothing makes room past the compute region: decisions made again at
    // the fitted rates may add only what the warm-up's peak left of it.
    ao.count_activations = f.runtime.evict.policy == EvictPolicy::kNone;
    ao.budget_bytes = static_cast<double>(
        (rt.budget_bytes() > 0 ? rt.budget_bytes() : rt.device().compute_region().capacity()) +
        rt.device().comm_region().capacity());
    ao.grad_region_bytes = static_cast<double>(rt.device().comm_region().capacity());
    // Under DTE the stored state may take a share of the budget; eviction needs the rest
    // for what it cannot evict (an op's inputs and outputs, what is pinned meanwhile).
    if (rt.budget_bytes() > 0) ao.state_bytes = f.dtp_state_share * static_cast<double>(rt.budget_bytes());
    ao.optimizer_states = f.optimizer == "adamw" ? 2 : f.momentum > 0 ? 1 : 0;
    ao.grad_bucket_bytes = static_cast<double>(f.bucket_bytes);
    ao.step_family = f.optimizer == "adamw" ? "adamw_step" : "sgd_step";
    ao.world = comm;  // rank 0's fitted rates reach every group alike
    ao.comm = comm != nullptr && comm->backend() == comm::Backend::kNccl ? partition::CollectiveModel::nccl_default()
                                                                         : partition::CollectiveModel::mpi_cpu_default();
    if (!f.dtp_comm_text.empty()) {
      ao.comm = value_or_exit(partition::CollectiveModel::from_bench_json(f.dtp_comm_text, ao.comm), "--dtp_comm: ");
    }
    if (f.dtp_auto) {
      if (absl::Status s = dtp::enable_auto(*model.net, group, ao); !s.ok()) {
        fail(kFailure, absl::StrCat("--dtp=auto: ", s.message()));
      }
      if (absl::Status s = rt.interpreter().sync(); !s.ok()) {
        fail(kFailure, absl::StrCat("placing the parameters for --dtp=auto: ", s.message()));
      }
      out("dtp: auto over %d ranks: lambda %g, %s per rank for the training state and each op (%s of it the "
          "comm region, for gradients only%s); parameters settle where their op's first decision places them\n",
          dtp::group_size(group), f.dtp_lambda, mib(static_cast<size_t>(ao.budget_bytes)).c_str(),
          mib(static_cast<size_t>(ao.grad_region_bytes)).c_str(),
          ao.state_bytes > 0 ? absl::StrCat("; stored state at most ", mib(static_cast<size_t>(ao.state_bytes)),
                                            ", --dtp_state_share ", f.dtp_state_share, " of the budget")
                                   .c_str()
                             : "");
    } else {
      dtp::set_forced_mode(f.dtp);
      const dtp::ShardFigures sf = value_or_exit(dtp::shard(*model.net, f.dtp, group), "--dtp: ");
      if (absl::Status s = rt.interpreter().sync(); !s.ok()) {
        fail(kFailure, absl::StrCat("placing the parameters for --dtp: ", s.message()));
      }
      reducer = value_or_exit(mesh.world ? dtp::GradReducer::create(*model.net, mesh, f.bucket_bytes)
                                         : dtp::GradReducer::create(*model.net, group, f.bucket_bytes));
      out("dtp: mode %s over %d ranks: %d modules placed, %d kept p1; parameters %s of %s on each rank, %d of them "
          "replicated (gradients summed over the ranks)\n",
          partition::mode_name(f.dtp), dtp::group_size(group), sf.modules, sf.kept_replicated,
          mib(sf.local_parameter_bytes).c_str(), mib(sf.global_parameter_bytes).c_str(),
          reducer->replicated_parameters());
      for (const std::string& n : sf.notes) out("dtp: note: %s\n", n.c_str());
      // The report and the rate fit, for a forced mode.
      if (f.dtp_report) {
        if (absl::Status s = dtp::enable_auto(*model.net, group, ao); !s.ok()) {
          fail(kFailure, absl::StrCat("--dtp_report: ", s.message()));
        }
      }
    }
  } else if (g_world.size > 1) {
    dist::DataParallelOptions dpo;
    dpo.bucket_bytes = f.bucket_bytes;
    if (f.moe_expert_parallel) {  // each rank's experts are its own
      for (const auto& b : moe_gpt->moe_blocks()) {
        for (const auto& expert : b->experts) {
          for (const Tensor& p : expert->parameters()) dpo.local.push_back(p);
        }
      }
    }
    dp = value_or_exit(dist::DataParallel::create(*model.net, comm, dpo));
    absl::StatusOr<dist::DataParallelFigures> fig = dp->figures();
    if (!fig.ok()) fail(kFailure, absl::StrCat("broadcasting rank 0's parameters: ", fig.status().message()));
    out("data parallel: %d gradient buckets, %s in the comm/gradient region\n", fig->buckets,
        mib(fig->bucket_bytes).c_str());
  }

  out("data: %s\n", data->describe().c_str());

  // The training state must fit before the first iteration starts: this rank's part of
  // the parameters, their gradients (in the comm/gradient region while it has room) and
  // the optimizer's state (AdamW two moments, SGD with momentum one buffer).
  {
    const size_t params = dtp::state_bytes(*model.net).parameters;
    const size_t per_param = f.optimizer == "adamw" ? 2 : f.momentum > 0 ? 1 : 0;
    const size_t need = params * (2 + per_param);
    const size_t compute = rt.budget_bytes() > 0 ? rt.budget_bytes() : rt.device().compute_region().capacity();
    const size_t have = compute + rt.device().comm_region().capacity();
    if (need > have) {
      fail(kBadValue,
           absl::StrCat("out of memory before training: the training state of ", f.model, " needs ", need,
                        " bytes (", mib(need), ") on each rank: parameters ", params, ", gradients ", params,
                        ", ", f.optimizer, " state ", params * per_param, ", against ", have, " bytes (", mib(have),
                        ") of compute", rt.budget_bytes() > 0 ? " budget" : " region", " and comm region: expected a "
                        "larger --memory",
                        f.dtp == dtp::Mode::kNone ? ", or --dtp=p2, p3 or p4 over more ranks (each rank keeps 1/p of it)"
                                                  : ", or more ranks"));
    }
  }
  std::unique_ptr<optim::Optimizer> opt;
  if (f.optimizer == "sgd") {
    opt = value_or_exit(
        optim::Sgd::create(model.net->parameters(), {.lr = static_cast<float>(f.lr),
                                                     .momentum = static_cast<float>(f.momentum),
                                                     .weight_decay = static_cast<float>(f.weight_decay)}));
  } else {
    opt = value_or_exit(optim::AdamW::create(
        model.net->parameters(),
        {.lr = static_cast<float>(f.lr), .eps = static_cast<float>(f.adam_eps),
         .weight_decay = static_cast<float>(f.weight_decay)}));
  }
  const bool scheduled = f.schedule.kind != optim::LrSchedule::Kind::kConstant || f.schedule.warmup > 0;
  out("optimizer: %s lr %g momentum %g weight_decay %g, batch %d, %d + %d warm-up iterations%s\n",
              f.optimizer.c_str(), f.lr, f.optimizer == "sgd" ? f.momentum : 0.0, f.weight_decay, f.batch,
              f.iterations, f.warmup, scheduled ? (", schedule: " + f.schedule.describe()).c_str() : "");
  std::fflush(stdout);

  // A failure inside an iteration surfaces at loss.item() (or backward): too little
  // memory is the user's to fix (status 2), anything else is a run-time failure.
  auto iteration_failed = [&](int it, const absl::Status& s) {
    const bool oom = s.code() == absl::StatusCode::kResourceExhausted;
    fail(oom ? kBadValue : kFailure, absl::StrCat("iteration ", it, ": ", s.message()));
  };

  // --resume: the model's tensors and the optimizer's state, the runtime's seed counter
  // (dropout), the data position and the SPOS generators as they were after the saved
  // iteration; the run goes on from the next one.
  const int start = input.resume ? input.resume->iteration : 0;
  if (input.resume) {
    checkpoint::SafetensorsFile& c = input.resume->file;
    auto meta = [&](const std::string& key) {
      auto it = c.metadata.find(key);
      return it == c.metadata.end() ? std::string() : it->second;
    };
    if (absl::Status s = checkpoint::restore(f.resume, c, *model.net, opt.get()); !s.ok()) {
      fail(kBadValue, "--resume: " + std::string(s.message()));
    }
    c.tensors.clear();  // restored: the metadata is all that is read from here on
    const int64_t position = input.resume->data_position;
    rt.set_seed_counter(input.resume->seed_counter);
    if (absl::Status s = data->seek(position); !s.ok()) fail(kBadValue, "--resume: " + std::string(s.message()));
    if (spos_sampler && !spos_sampler->set_state(meta("rng.spos_sampler")).ok()) {
      fail(kBadValue, absl::StrCat("--resume '", f.resume, "': metadata rng.spos_sampler '", meta("rng.spos_sampler"),
                                   "': expected the state of the SPOS sampler (was it saved with a fixed --spos_path?)"));
    }
    if (spos_pick && !spos_pick->set_state(meta("rng.spos_pick")).ok()) {
      fail(kBadValue, absl::StrCat("--resume '", f.resume, "': metadata rng.spos_pick '", meta("rng.spos_pick"),
                                   "': expected the state of --spos_pool's generator (was it saved with --spos_pool?)"));
    }
    out("resumed: %s, iteration %d, data position %lld\n", f.resume.c_str(), start, static_cast<long long>(position));
  }
  // evaluate: --eval_every's pass over the held-out batches (the same ones each time), in
  // eval mode and without autograd. Each rank takes its rows of every batch; the sums of
  // loss and hits are all-reduced, so every rank prints the same figures.
  auto evaluate = [&](int it) {
    if (input.eval == nullptr) return;
    const auto t0 = std::chrono::steady_clock::now();
    if (absl::Status s = input.eval->seek(0); !s.ok()) iteration_failed(it, s);
    model.net->eval();
    double sums[4] = {0, 0, 0, 0};  // loss x rows, top-1 hits, top-5 hits, rows
    int k = 0;
    {
      NoGradGuard no_grad;
      for (int b = 0; b < f.eval_batches; ++b) {
        const data::Batch d = data::to_device(rank_rows(input.eval->next(f.batch)));
        Tensor logits = model.net->forward(d.images);
        Tensor labels = d.labels;
        if (logits.defined() && !logits.poisoned() && logits.ndim() == 3) {  // a language model's (N, T, V)
          logits = reshape(logits, {-1, logits.dim(2)});
          labels = reshape(labels, {-1});
        }
        k = logits.defined() && !logits.poisoned() ? static_cast<int>(std::min<int64_t>(5, logits.dim(-1))) : 1;
        absl::StatusOr<float> loss = cross_entropy(logits, labels).item();
        absl::StatusOr<std::vector<int32_t>> top = topk(logits, k).to_vector_i32();
        absl::StatusOr<std::vector<int32_t>> want = labels.to_vector_i32();
        if (!loss.ok()) iteration_failed(it, loss.status());
        if (!top.ok()) iteration_failed(it, top.status());
        if (!want.ok()) iteration_failed(it, want.status());
        for (size_t r = 0; r < want->size(); ++r) {
          for (int j = 0; j < k; ++j) {
            if ((*top)[r * k + j] != (*want)[r]) continue;
            sums[1] += j == 0;
            sums[2] += 1;
          }
        }
        sums[0] += static_cast<double>(*loss) * static_cast<double>(want->size());
        sums[3] += static_cast<double>(want->size());
      }
      if (comm != nullptr && comm->world_size() > 1) {
        std::vector<float> v(std::begin(sums), std::end(sums));
        absl::StatusOr<std::vector<float>> all =
            dist::all_reduce(from_vector(Shape{4}, v), dist::Reduce::kSum, comm).to_vector();
        if (!all.ok()) iteration_failed(it, all.status());
        for (int i = 0; i < 4; ++i) sums[i] = (*all)[i];
      }
    }
    model.net->train();
    out("eval iter %d: loss %.6f top-1 %.2f%% top-%d %.2f%% (%.0f samples, %.2f s)\n", it, sums[0] / sums[3],
        100 * sums[1] / sums[3], k, 100 * sums[2] / sums[3], sums[3],
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  // show_live: the terminal's line for iteration `it`, rewritten in place: loss,
  // samples/s and the time left over the last (up to) 10 iterations, the compute region's
  // bytes in use and its peak.
  auto show_live = [&](int it, int total, float loss, const std::vector<double>& sec) {
    const size_t n = std::min<size_t>(sec.size(), 10);
    double recent = 0;
    for (size_t i = sec.size() - n; i < sec.size(); ++i) recent += sec[i];
    recent /= static_cast<double>(n);
    absl::StatusOr<MemoryStats> m = rt.interpreter().memory_stats();
    const int64_t left = static_cast<int64_t>(recent * (total - it) + 0.5);
    std::string line = absl::StrFormat("iter %d/%d loss %.4f | %.1f samples/s", it, total, loss, f.batch / recent);
    if (m.ok()) {
      absl::StrAppend(&line, absl::StrFormat(" | compute %s, peak %s", mib(m->compute.allocated).c_str(),
                                             mib(m->compute.peak_allocated).c_str()));
    }
    absl::StrAppend(&line, absl::StrFormat(" | %dm%02ds left", left / 60, left % 60));
    std::printf("\r\x1b[2K%s", line.c_str());
    std::fflush(stdout);
    g_live_line = true;
  };
  // metrics: --metrics' file, a JSON object per iteration (docs/metrics.md gives the
  // fields); totals are since the run started, peaks since the timed iterations began.
  std::FILE* metrics = nullptr;
  if (!f.metrics.empty()) {
    metrics = std::fopen(f.metrics.c_str(), "w");
    if (metrics == nullptr) fail(kBadValue, absl::StrCat("--metrics ", f.metrics, ": ", std::strerror(errno)));
  }
  auto write_metrics = [&](int it, bool timed, float loss, double sec) {
    absl::StatusOr<MemoryStats> m = rt.interpreter().memory_stats();
    absl::StatusOr<EvictStats> e = rt.interpreter().evict_stats();
    absl::StatusOr<TmaFigures> t = rt.interpreter().tma_stats();
    if (!m.ok() || !e.ok() || !t.ok()) iteration_failed(it, !m.ok() ? m.status() : !e.ok() ? e.status() : t.status());
    auto region = [](const RegionFigures& r) {
      return absl::StrFormat(
          R"({"capacity":%zu,"allocated":%zu,"peak":%zu,"high_water":%zu,"largest_free":%zu,"fragmentation":%.6f})",
          r.capacity, r.allocated, r.peak_allocated, r.high_water, r.largest_free, r.fragmentation);
    };
    const std::string line = absl::StrFormat(
        R"({"iteration":%d,"timed":%s,"loss":%.9g,"lr":%.9g,"sec":%.6f,"samples_per_sec":%.3f,"budget":%zu,)"
        R"("compute":%s,"comm":%s,"evict":{"drop":%llu,"swap":%llu,"fragmented":%llu,"recomputes":%llu,)"
        R"("recompute_sec":%.6f,"swapped_out_bytes":%llu,"swapped_in_bytes":%llu,"compactions":%llu},)"
        R"("tma":{"hits":%llu,"misses":%llu,"plans":%llu,"cache_hits":%llu,"cache_lookups":%llu}})"
        "\n",
        it, timed ? "true" : "false", std::isfinite(loss) ? loss : 0.f, opt->lr(), sec, sec > 0 ? f.batch / sec : 0.0,
        rt.budget_bytes(), region(m->compute), region(m->comm), static_cast<unsigned long long>(e->evict_drop),
        static_cast<unsigned long long>(e->evict_swap), static_cast<unsigned long long>(e->evict_fragmented),
        static_cast<unsigned long long>(e->recomputes), e->recompute_us * 1e-6,
        static_cast<unsigned long long>(e->swapped_out_bytes), static_cast<unsigned long long>(e->swapped_in_bytes),
        static_cast<unsigned long long>(e->compactions), static_cast<unsigned long long>(t->hits),
        static_cast<unsigned long long>(t->misses), static_cast<unsigned long long>(t->plans),
        static_cast<unsigned long long>(t->cache_hits), static_cast<unsigned long long>(t->cache_lookups));
    if (std::fputs(line.c_str(), metrics) < 0 || std::fflush(metrics) != 0) {
      fail(kFailure, absl::StrCat("iteration ", it, ": --metrics ", f.metrics, ": ", std::strerror(errno)));
    }
  };
  // untimed: this run's warm-up iterations (none left when it resumes past them).
  const int untimed = std::max(0, f.warmup - start);
  // save: the checkpoint after iteration `it`. Under data parallel every tensor is
  // replicated and rank 0 writes them all. When the ranks hold tensors of their own (DTP's
  // splits, expert parallelism's experts) each rank first writes its own file, tagged
  // with the iteration, then rank 0 the main file that names them, and each rank removes
  // its file of the save before (docs/checkpoints.md).
  const bool ranked = g_world.size > 1 && (group != nullptr || f.moe_expert_parallel);
  std::set<uint64_t> own_ids;  // expert parallelism: this rank's experts' parameters
  if (f.moe_expert_parallel && moe_gpt != nullptr) {
    for (const auto& b : moe_gpt->moe_blocks()) {
      for (const auto& expert : b->experts) {
        for (const Tensor& p : expert->parameters()) own_ids.insert(p.id());
      }
    }
  }
  std::string previous_tag;  // the rank files of this run's last save
  if (input.resume && f.save == f.resume) previous_tag = input.resume->file.metadata["rank_files_tag"];
  auto barrier = [&](int it, const char* what) {
    if (absl::Status s = comm->barrier()->wait(); !s.ok()) {
      fail(kFailure, absl::StrCat("iteration ", it, ": --save: ", what, ": ", s.message()));
    }
  };
  auto save = [&](int it, int64_t data_position) {
    if (g_world.rank != 0 && !ranked) return;
    const auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, std::string> m = {{"iteration", absl::StrCat(it)},
                                            {"model", f.model},
                                            {"seed", absl::StrCat(f.seed)},
                                            {"flags", g_command_line},
                                            {"data_position", absl::StrCat(data_position)},
                                            {"rng.runtime", absl::StrCat(rt.seed_counter())},
                                            {"world_size", absl::StrCat(g_world.size)}};
    if (spos_sampler) m["rng.spos_sampler"] = spos_sampler->state();
    if (spos_pick) m["rng.spos_pick"] = spos_pick->state();
    checkpoint::WriteOptions wo;
    if (f.fail_mode == "kill_while_saving" && f.fail_rank == g_world.rank && it == f.fail_iteration) {
      wo.halfway = [] { std::raise(SIGKILL); };
    }
    size_t bytes = 0;
    checkpoint::SafetensorsFile main;
    if (ranked) {
      const std::string tag = absl::StrCat("iter", it);
      absl::StatusOr<checkpoint::RankedState> c = checkpoint::collect_ranked(
          *model.net, opt.get(), std::move(m), [&](const Tensor& t) { return own_ids.count(t.id()) != 0; });
      if (!c.ok()) iteration_failed(it, c.status());
      c->own.metadata["rank"] = absl::StrCat(g_world.rank);
      c->own.metadata["rank_files_tag"] = tag;
      for (const auto& [name, t] : c->own.tensors) bytes += t.data.size();
      const std::string mine = checkpoint::rank_file(f.save, tag, g_world.rank);
      if (absl::Status s = checkpoint::write_safetensors(mine, c->own, wo); !s.ok()) {
        fail(kFailure, absl::StrCat("iteration ", it, ": --save: ", s.message()));
      }
      barrier(it, "waiting for every rank's file");
      main = std::move(c->shared);
      main.metadata["rank_files"] = absl::StrCat(g_world.size);
      main.metadata["rank_files_tag"] = tag;
      if (g_world.rank == 0) {
        for (const auto& [name, t] : main.tensors) bytes += t.data.size();
        if (absl::Status s = checkpoint::write_safetensors(f.save, main, wo); !s.ok()) {
          fail(kFailure, absl::StrCat("iteration ", it, ": --save: ", s.message()));
        }
      }
      barrier(it, "waiting for the main file");
      if (!previous_tag.empty() && previous_tag != tag) {
        std::remove(checkpoint::rank_file(f.save, previous_tag, g_world.rank).c_str());
      }
      previous_tag = tag;
    } else {
      absl::StatusOr<checkpoint::SafetensorsFile> c = checkpoint::collect(*model.net, opt.get(), std::move(m));
      if (!c.ok()) iteration_failed(it, c.status());
      for (const auto& [name, t] : c->tensors) bytes += t.data.size();
      if (absl::Status s = checkpoint::write_safetensors(f.save, *c, wo); !s.ok()) {
        fail(kFailure, absl::StrCat("iteration ", it, ": --save: ", s.message()));
      }
    }
    out("checkpoint: iteration %d saved to %s%s (%s of tensors%s, %.2f s)\n", it, f.save.c_str(),
        ranked ? absl::StrCat(" and ", g_world.size, " rank files").c_str() : "", mib(bytes).c_str(),
        ranked ? " on rank 0" : "", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };

  model.net->train();
  std::vector<double> seconds;  // per iteration, wall clock
  double window = 0;            // seconds since the last progress line
  int window_iters = 0;
  float loss_value = 0;
  size_t peak = 0;
  // DTE's totals when the timed iterations begin (after the warm-up ones) and at the end.
  auto evict_stats = [&](int it) {
    absl::StatusOr<EvictStats> s = rt.interpreter().evict_stats();
    if (!s.ok()) iteration_failed(it, s.status());
    return *s;
  };
  EvictStats ev_start = untimed == 0 ? evict_stats(0) : EvictStats{};
  // TMA's totals likewise, and the compute region's high-water mark over the timed
  // iterations (its peak statistics restart when they begin).
  auto tma_stats = [&](int it) {
    absl::StatusOr<TmaFigures> s = rt.interpreter().tma_stats();
    if (!s.ok()) iteration_failed(it, s.status());
    return *s;
  };
  TmaFigures tma_start = untimed == 0 ? tma_stats(0) : TmaFigures{};
  size_t high_water = 0;
  // Every rank draws the same global batch and keeps its own rows of it, so N ranks see
  // exactly the samples one rank would with the whole batch.
  data::HostBatch host = rank_rows(data->next(f.batch));
  // The gradient all-reduce: data parallel's, or under DTP the one of the replicated
  // parameters.
  auto dpp = [&]() -> dist::DataParallel* { return dp ? dp.get() : reducer ? reducer->data_parallel() : nullptr; };
  // Under DTP the reducer finishes the gradients (the Replicated ones' buckets and, on a
  // mesh, the ones across groups). Under --dtp=auto the forward settles where each
  // parameter lives (and after the rate fit a decision may move one): the reducer follows
  // once the forward is issued.
  models::StepHooks hooks;
  if (group != nullptr) {
    hooks.finish = [&] { reducer->finish(); };
    hooks.after_forward = [&]() -> absl::Status {
      if (reducer == nullptr) {
        MTC_ASSIGN_OR_RETURN(reducer, mesh.world ? dtp::GradReducer::create(*model.net, mesh, f.bucket_bytes)
                                                 : dtp::GradReducer::create(*model.net, group, f.bucket_bytes));
        return absl::OkStatus();
      }
      return reducer->refresh(*model.net);
    };
  }
  auto device_batch = [&](const data::HostBatch& h) {
    data::Batch b = data::to_device(h);
    if (group == nullptr) return b;
    Shape gi = b.images.shape(), gl = b.labels.shape();
    gi[0] = gl[0] = f.batch / (mesh.groups > 0 ? mesh.groups : 1);  // the group's part of the batch
    b.images = dtp::distribute(b.images, gi, dtp::Placement::S(0), group);
    b.labels = dtp::distribute(b.labels, gl, dtp::Placement::S(0), group);
    return b;
  };
  dist::DataParallelFigures dp_start, dp_end;
  auto dp_figures = [&](int it) {
    if (dp == nullptr && reducer == nullptr) return dist::DataParallelFigures{};
    // Under DTP the reducer's figures: a move after the rate fit makes its buckets again.
    absl::StatusOr<dist::DataParallelFigures> fig = dp ? dp->figures() : reducer->figures();
    if (!fig.ok()) iteration_failed(it, fig.status());
    return *fig;
  };
  if (untimed == 0) dp_start = dp_figures(0);
  const int total = f.warmup + f.iterations;  // iterations 1..warmup are not timed
  const int timed_iterations = total - start - untimed;
  EvictStats ev_window = ev_start;  // at the last progress line
  for (int it = start + 1; it <= total; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    inject_failure(f, it);
    g_pending_trace.clear();  // training has started: a failure from here leaves FILE.partial
    g_pending_chrome.clear();
    rt.interpreter().mark("iteration", it);
    if (spos_pick) {
      if (absl::Status s = spos->set_path(spos_pool[spos_pick->below(static_cast<uint32_t>(spos_pool.size()))]); !s.ok()) {
        iteration_failed(it, s);
      }
    } else if (spos_sampler) {
      absl::StatusOr<std::vector<int>> p = spos_sampler->next();
      if (!p.ok()) iteration_failed(it, p.status());
      if (absl::Status s = spos->set_path(*p); !s.ok()) iteration_failed(it, s);
    }
    opt->set_lr(f.schedule.at(it));
    absl::StatusOr<Tensor> loss = models::train_step(*model.net, *opt, device_batch(host), dpp(), group ? &hooks : nullptr);
    if (!loss.ok()) iteration_failed(it, loss.status());
    // The loss of the global batch: the mean of the ranks' means (equal shares); under
    // DTP the loss is a global tensor already.
    Tensor global_loss = dp != nullptr ? dist::all_reduce(loss->detach(), dist::Reduce::kAvg, comm) : *loss;
    absl::StatusOr<float> l = global_loss.item();  // synchronises: the iteration has run
    if (l.ok() && mesh.groups > 1) {  // on a mesh each group's loss is its part's: the mean over the groups
      NoGradGuard no_grad;
      const float mine = *l;
      l = dist::all_reduce(rt.interpreter().put(TensorDesc{Shape{1}, DType::kF32}, &mine), dist::Reduce::kAvg,
                           mesh.across).item();
    }
    if (!l.ok()) iteration_failed(it, l.status());
    if (absl::Status s = dtp::end_iteration(group); !s.ok()) iteration_failed(it, s);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loss_value = *l;
    if (!std::isfinite(loss_value) && !f.allow_nonfinite) {
      // Every rank holds the same global loss and stops here; rank 0 says why.
      if (g_world.rank == 0) {
        std::fprintf(stderr,
                     "mtc-train: error: iteration %d: the loss is %s: training diverged (expected a finite loss; "
                     "a smaller --lr may help, --allow_nonfinite keeps going)\n",
                     it, std::isnan(loss_value) ? "NaN" : "infinite");
      }
      std::fflush(nullptr);
      return kFailure;
    }
    seconds.push_back(dt);
    if (it == f.warmup) {
      ev_start = evict_stats(it);
      tma_start = tma_stats(it);
      dp_start = dp_figures(it);
      // The memory figures of the summary cover the timed iterations too.
      if (absl::Status s = rt.interpreter().reset_peak(); !s.ok()) iteration_failed(it, s);
    }
    window += dt;
    ++window_iters;
    if (f.live_progress) show_live(it, total, loss_value, seconds);
    if (metrics != nullptr) write_metrics(it, it - start > untimed, loss_value, dt);
    const int64_t data_position = data->position();  // the batches of iterations 1..it
    if (it < total) host = rank_rows(data->next(f.batch));  // host-side data stays out of the timing
    if (it % f.log_every == 0 || it == total) {
      absl::StatusOr<MemoryStats> m = rt.interpreter().memory_stats();
      if (!m.ok()) iteration_failed(it, m.status());
      peak = m->compute.peak_allocated;
      high_water = m->compute.high_water;
      const double ms = 1e3 * window / window_iters;
      out("iter %d loss %.6f samples/s %.1f ms %.1f peak_compute %.1f MiB", it, loss_value,
                  f.batch * 1e3 / ms, ms, peak / 1048576.0);
      if (scheduled) out(" lr %g", opt->lr());
      if (f.runtime.evict.policy != EvictPolicy::kNone) {  // DTE per iteration, over the window
        const EvictStats e = evict_stats(it);
        const double n = window_iters;
        out(" | per iter: drop %.1f swap %.1f recompute %.1f (%.1f ms) swapped %.1f MiB search %.2f ms",
                    (e.evict_drop - ev_window.evict_drop) / n, (e.evict_swap - ev_window.evict_swap) / n,
                    (e.recomputes - ev_window.recomputes) / n, (e.recompute_us - ev_window.recompute_us) / n * 1e-3,
                    (e.swapped_out_bytes - ev_window.swapped_out_bytes) / n / 1048576.0,
                    (e.search_us - ev_window.search_us) / n * 1e-3);
        ev_window = e;
      }
      if (spos != nullptr) out(" | path %s", absl::StrJoin(spos->path(), ",").c_str());  // the last iteration's
      if (moe_gpt != nullptr) {  // the last iteration's routing: tokens per expert in each MoE block, and drops
        std::vector<std::string> blocks;
        int64_t dropped = 0, padded = 0;
        for (const auto& b : moe_gpt->moe_blocks()) {
          std::vector<int64_t> n;
          for (const auto& tk : b->routing().tokens) n.push_back(static_cast<int64_t>(tk.size()));
          blocks.push_back(absl::StrJoin(n, ","));
          dropped += b->routing().dropped;
          padded += b->routing().padded;
        }
        out(" | experts %s dropped %lld", absl::StrJoin(blocks, " ").c_str(), static_cast<long long>(dropped));
        if (f.moe.bucket > 0) out(" padded %lld", static_cast<long long>(padded));
      }
      out("\n");
      std::fflush(stdout);
      window = 0;
      window_iters = 0;
    }
    if (f.eval_every > 0 && (it % f.eval_every == 0 || it == total)) evaluate(it);
    if (!f.save.empty() && ((f.save_every > 0 && it % f.save_every == 0) || it == total)) save(it, data_position);
  }

  // The mean over the timed iterations, those after the warm-up ones.
  double timed = 0;
  for (size_t i = untimed; i < seconds.size(); ++i) timed += seconds[i];
  const EvictStats ev_end = evict_stats(total);
  const TmaFigures tma_end = tma_stats(total);
  const double sec_per_iter = timed / timed_iterations;
  // The median and the least too: an iteration slowed by another process moves the mean
  // but not the median, and the least is the time undisturbed by such slow spells.
  std::vector<double> sorted(seconds.begin() + untimed, seconds.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  const double median_sec = sorted.size() % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
  // Data parallel over the timed iterations: the all-reduces' time on the communicator's
  // queue, and the part of it the interpreter waited for after the backward (exposed).
  dp_end = dp_figures(total);
  const double dp_comm = dp_end.comm_sec - dp_start.comm_sec;
  const double dp_exposed = dp_end.exposed_sec - dp_start.exposed_sec;
  const double dp_hidden = dp_comm > 0 ? std::clamp(1.0 - dp_exposed / dp_comm, 0.0, 1.0) : 0.0;
  // Every rank's regions: m1 (comm/gradient) and m2 (compute).
  absl::StatusOr<MemoryStats> mem = rt.interpreter().memory_stats();
  if (!mem.ok()) iteration_failed(total, mem.status());
  const std::vector<RankMemory> ranks = gather_memory(*mem, comm);
  {
    // This rank's training state by kind (rank 0's shown; under DTP every rank holds its
    // part), and the ops DTP ran in each mode.
    const dtp::StateBytes sb = dtp::state_bytes(*model.net);
    const size_t optim_bytes = opt->state_bytes();
    out("state dtp=%s ranks=%d param_bytes=%zu grad_bytes=%zu optim_bytes=%zu state_bytes=%zu "
        "ops_p1=%llu ops_p2=%llu ops_p3=%llu ops_p4=%llu\n",
        f.dtp_auto ? "auto" : f.dtp == dtp::Mode::kNone ? "off" : partition::mode_name(f.dtp), g_world.size, sb.parameters, sb.gradients,
        optim_bytes,
        sb.parameters + sb.gradients + optim_bytes,
        static_cast<unsigned long long>(dtp::mode_count(dtp::Mode::kP1)),
        static_cast<unsigned long long>(dtp::mode_count(dtp::Mode::kP2)),
        static_cast<unsigned long long>(dtp::mode_count(dtp::Mode::kP3)),
        static_cast<unsigned long long>(dtp::mode_count(dtp::Mode::kP4)));
  }
  if (f.dtp_auto || f.dtp_report) {
    // The planner: its decisions, and the time they took against the whole run's.
    const dtp::AutoFigures a = dtp::auto_figures(group);
    double all_sec = 0;
    for (double s : seconds) all_sec += s;
    out("dtp planner: decisions=%llu cache_hits=%llu settled=%llu moved=%llu shared_moved=%llu decide_sec=%.6f "
        "decide_share=%.5f "
        "decide_us_per_call=%.3f hit_us_per_call=%.3f rates=%s fitted_families=%d\n",
        static_cast<unsigned long long>(a.decisions), static_cast<unsigned long long>(a.hits),
        static_cast<unsigned long long>(a.settled), static_cast<unsigned long long>(a.moves),
        static_cast<unsigned long long>(a.shared_moves), a.decide_us * 1e-6,
        all_sec > 0 ? a.decide_us * 1e-6 / all_sec : 0.0,
        a.decisions + a.hits > 0 ? a.decide_us / static_cast<double>(a.decisions + a.hits) : 0.0,
        a.hits > 0 ? a.hit_us / static_cast<double>(a.hits) : 0.0,
        a.fitted ? "fitted" : "default", a.families);
    if (a.activation_room_bytes >= 0) {
      out("dtp planner: activation_room_mib=%.1f activation_added_mib=%.1f (the compute region less the warm-up's "
          "peak, and what the decisions made after the fit added)\n",
          a.activation_room_bytes / (1 << 20), a.activation_added_bytes / (1 << 20));
    }
    if (f.dtp_report && g_world.rank == 0) std::fputs(dtp::auto_summary(group).c_str(), stdout);
  }
  if (f.runtime.evict.policy == EvictPolicy::kMtc) {
    // DTE's score, tuned after the first two iterations when they evicted anything.
    absl::StatusOr<std::string> t = rt.interpreter().dte_tuning();
    if (!t.ok()) iteration_failed(total, t.status());
    if (!t->empty()) out("dte tuning: %s\n", t->c_str());
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankMemory& m = ranks[r];
    out("memory rank %zu: m1 %s, %s in use, peak %s; m2 %s, peak %s, high water %s\n", r,
        mib(m.m1_capacity).c_str(), mib(m.m1_allocated).c_str(), mib(m.m1_peak).c_str(), mib(m.m2_capacity).c_str(),
        mib(m.m2_peak).c_str(), mib(m.m2_high_water).c_str());
  }
  out(
      "summary model=%s batch=%d iterations=%d sec_per_iter=%.6f median_sec_per_iter=%.6f "
      "min_sec_per_iter=%.6f samples_per_sec=%.1f final_loss=%.6f peak_compute_bytes=%zu "
      "evict_drop=%llu evict_swap=%llu evict_fragmented=%llu recomputes=%llu recompute_sec=%.4f swapped_bytes=%llu "
      "search_sec=%.4f compute_sec=%.4f swap_sec=%.4f high_water_compute_bytes=%zu tma_hits=%llu "
      "tma_misses=%llu tma_plans=%llu tma_cache_hits=%llu tma_cache_lookups=%llu ranks=%d peak_comm_bytes=%zu "
      "dp_buckets=%d dp_comm_sec=%.4f dp_exposed_sec=%.4f dp_hidden_share=%.3f compactions=%llu moved_bytes=%llu "
      "move_sec=%.4f tma_plans_cached=%zu tma_plans_evicted=%llu tma_cache_bytes=%zu dp_reduced_bytes=%llu "
      "tma_plan_sec=%.4f tma_max_plan_sec=%.4f tma_plan_peak=%zu tma_plan_lower_bound=%zu\n",
      f.model.c_str(), f.batch, timed_iterations, sec_per_iter, median_sec, sorted.front(),
      f.batch / sec_per_iter, loss_value, peak,
      static_cast<unsigned long long>(ev_end.evict_drop - ev_start.evict_drop),
      static_cast<unsigned long long>(ev_end.evict_swap - ev_start.evict_swap),
      static_cast<unsigned long long>(ev_end.evict_fragmented - ev_start.evict_fragmented),
      static_cast<unsigned long long>(ev_end.recomputes - ev_start.recomputes),
      (ev_end.recompute_us - ev_start.recompute_us) * 1e-6,
      static_cast<unsigned long long>(ev_end.swapped_out_bytes - ev_start.swapped_out_bytes),
      (ev_end.search_us - ev_start.search_us) * 1e-6, (ev_end.compute_us - ev_start.compute_us) * 1e-6,
      (ev_end.swap_us - ev_start.swap_us) * 1e-6, high_water,
      static_cast<unsigned long long>(tma_end.hits - tma_start.hits),
      static_cast<unsigned long long>(tma_end.misses - tma_start.misses),
      static_cast<unsigned long long>(tma_end.plans),
      static_cast<unsigned long long>(tma_end.cache_hits - tma_start.cache_hits),
      static_cast<unsigned long long>(tma_end.cache_lookups - tma_start.cache_lookups), g_world.size,
      mem->comm.peak_allocated, dp_end.buckets, dp_comm, dp_exposed, dp_hidden,
      static_cast<unsigned long long>(ev_end.compactions - ev_start.compactions),
      static_cast<unsigned long long>(ev_end.moved_bytes - ev_start.moved_bytes),
      (ev_end.move_us - ev_start.move_us) * 1e-6, tma_end.plans_cached,
      static_cast<unsigned long long>(tma_end.plans_evicted), tma_end.cache_bytes,
      static_cast<unsigned long long>(dp_end.reduced_bytes - dp_start.reduced_bytes), tma_end.plan_sec,
      tma_end.max_plan_sec, tma_end.last_plan_peak, tma_end.last_plan_lower_bound);
  std::fflush(stdout);
  if (absl::Status s = rt.interpreter().close_trace(); !s.ok()) fail(kFailure, std::string(s.message()));
  if (!f.runtime.trace_path.empty()) out("trace: %s\n", f.runtime.trace_path.c_str());
  if (!f.runtime.chrome_trace_path.empty()) out("chrome trace: %s\n", f.runtime.chrome_trace_path.c_str());
  if (metrics != nullptr && std::fclose(metrics) != 0) {
    fail(kFailure, absl::StrCat("--metrics ", f.metrics, ": ", std::strerror(errno)));
  }
  return 0;
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  // The job's layout first: flag errors are reported by rank 0 alone, later errors name
  // the rank.
  absl::StatusOr<mtc::launch::World> world = mtc::launch::world_from_environment();
  if (!world.ok()) mtc::cli::fail("mtc-train", mtc::kBadValue, std::string(world.status().message()));
  mtc::g_world = *world;
  // An exception nothing caught stops the job like any other failure of this rank.
  std::set_terminate([] {
    std::string what = "an uncaught exception";
    if (std::exception_ptr e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = absl::StrCat("an uncaught exception: ", x.what());
      } catch (...) {
      }
    }
    mtc::fail(mtc::kFailure, what);
  });
  for (int i = 1; i < argc; ++i) absl::StrAppend(&mtc::g_command_line, i > 1 ? " " : "", argv[i]);
  // Every flag is checked before the ranks connect: a bad one ends every rank at once,
  // with status 2 and one line from rank 0.
  mtc::cli::parse_flags("mtc-train", "mtc_train",
                        "trains a model on the mtc runtime and reports loss, throughput and peak memory.\n"
                        "  mtc-train --model=resnet56 --batch=64 --iterations=20 [--data=cifar10:PATH] "
                        "[--memory=2GiB]\n"
                        "  mpirun -np 4 mtc-train --model=resnet20 --batch=256 [--sync_bn]   (data parallel)",
                        argc, argv);
  mtc::Flags flags = mtc::read_flags();
  mtc::Input input = mtc::open_input(flags);  // settles --epochs' iterations
  // Open MPI's waiting threads spin by default. A rank's comm thread waits in MPI while
  // its kernels run, and with as many ranks as cores the spinning takes their cores:
  // waiting threads yield instead, unless the user set it (benchmarks/dp_overlap.sh).
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
  if (absl::Status s = mtc::comm::init(&argc, &argv); !s.ok()) mtc::fail(mtc::kFailure, std::string(s.message()));
  mtc::g_comm_started = true;
  const int status = mtc::run(flags, std::move(input));
  mtc::comm::finalize();
  return status;
}
