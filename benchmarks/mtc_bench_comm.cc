// mtc-bench-comm: times comm/'s collectives over a sweep of message sizes, prints one
// table per collective with nccl-tests' columns (size, count, type, time, algbw, busbw;
// their doc/PERFORMANCE.md formulas), fits time_us = alpha_us + beta_us_per_byte * bytes
// to each by least squares, and writes the fits as the alpha-beta JSON that DTP's
// partition cost model reads (docs/comm.md). Runs as one rank without mpirun (local
// backend), or under mpirun (mpi, or nccl with a GPU per rank).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli.h"
#include "comm/communicator.h"
#include "nlohmann/json.hpp"

#ifdef MTC_COMM_HAVE_MPI
#include <mpi.h>
#endif
#ifdef MTC_COMM_HAVE_NCCL
#include <cuda_runtime.h>
#endif

ABSL_FLAG(std::string, backend, "auto",
          "auto, local, mpi or nccl (auto: nccl with a GPU and NCCL, else mpi under mpirun, else local)");
ABSL_FLAG(std::string, min_bytes, "8",
          "the smallest size: bytes, or with a suffix K, M, G (= KiB, MiB, GiB)");
ABSL_FLAG(std::string, max_bytes, "64MiB", "the largest size (as --min_bytes)");
ABSL_FLAG(std::string, step_factor, "4", "each size is this many times the previous (an integer >= 2)");
ABSL_FLAG(std::string, iters, "20", "timed iterations per size");
ABSL_FLAG(std::string, warmup_iters, "5", "untimed iterations per size before the timed ones");
ABSL_FLAG(std::string, collectives, "all",
          "comma-separated: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast (all: every one)");
ABSL_FLAG(std::string, type, "f32", "the element type: f32 or i32");
ABSL_FLAG(std::string, out, "comm_model.json",
          "where rank 0 writes the alpha-beta fits (FILE.tmp, then renamed)");
ABSL_FLAG(bool, check, false, "turn on comm/'s argument check (every call exchanges its arguments first)");

namespace mtc {
namespace {

using comm::Backend;
using comm::Communicator;
using comm::DataType;

constexpr const char* kTool = "mtc-bench-comm";
constexpr int kBadInput = 2;  // bad flags
constexpr int kFailed = 1;    // a collective or the output failed
// fail: bad flags are checked by every rank alike and reported by rank 0 alone.
[[noreturn]] void fail(int status, const std::string& what) {
  if (status == kBadInput) cli::fail_flags(kTool, what);
  cli::fail(kTool, status, what);
}

const char* const kAllCollectives[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                       "broadcast"};

// busbw_factor: nccl-tests' bus bandwidth over algorithm bandwidth for n ranks.
double busbw_factor(const std::string& c, int n) {
  if (c == "all_reduce") return 2.0 * (n - 1) / n;
  if (c == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;  // all_gather, reduce_scatter, all_to_all
}

// blocked: the printed size is the whole of n per-rank blocks (nccl-tests' convention).
bool blocked(const std::string& c) { return c == "all_gather" || c == "reduce_scatter" || c == "all_to_all"; }

uint64_t parse_bytes(const char* flag, const std::string& text) {
  std::string t = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  uint64_t unit = 1;
  for (auto [suffix, u] : {std::pair<const char*, uint64_t>{"KIB", 1ull << 10},
                           {"MIB", 1ull << 20},
                           {"GIB", 1ull << 30},
                           {"K", 1ull << 10},
                           {"M", 1ull << 20},
                           {"G", 1ull << 30}}) {
    if (absl::EndsWith(t, suffix)) {
      t.resize(t.size() - std::strlen(suffix));
      unit = u;
      break;
    }
  }
  uint64_t v = 0;
  if (t.empty() || !absl::SimpleAtoi(t, &v) || v == 0 || v > (1ull << 40) / unit) {
    fail(kBadInput,
         absl::StrCat("--", flag, " '", text,
                      "': expected a byte count from 1 to 1TiB: a number, or with a suffix K, M, G, KiB, "
                      "MiB or GiB (powers of 1024)"));
  }
  return v * unit;
}

int parse_int(const char* flag, const std::string& text, int min, int max) {
  int v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < min || v > max) {
    fail(kBadInput, absl::StrCat("--", flag, " '", text, "': expected an integer from ", min, " to ", max));
  }
  return v;
}

struct Config {
  std::string backend;
  uint64_t min_bytes = 0, max_bytes = 0;
  int step_factor = 4, iters = 20, warmup = 5;
  std::vector<std::string> collectives;
  DataType type = DataType::kF32;
  std::string out;
  bool check = false;
};

Config read_flags() {
  Config c;
  c.backend = absl::GetFlag(FLAGS_backend);
  if (c.backend != "auto" && c.backend != "local" && c.backend != "mpi" && c.backend != "nccl") {
    fail(kBadInput, absl::StrCat("--backend '", c.backend, "': expected auto, local, mpi or nccl"));
  }
  c.min_bytes = parse_bytes("min_bytes", absl::GetFlag(FLAGS_min_bytes));
  c.max_bytes = parse_bytes("max_bytes", absl::GetFlag(FLAGS_max_bytes));
  if (c.max_bytes < c.min_bytes) {
    fail(kBadInput, absl::StrCat("--max_bytes ", c.max_bytes, " is below --min_bytes ", c.min_bytes,
                                 ": expected min_bytes <= max_bytes"));
  }
  c.step_factor = parse_int("step_factor", absl::GetFlag(FLAGS_step_factor), 2, 1 << 20);
  c.iters = parse_int("iters", absl::GetFlag(FLAGS_iters), 1, 1 << 24);
  c.warmup = parse_int("warmup_iters", absl::GetFlag(FLAGS_warmup_iters), 0, 1 << 24);
  const std::string list = absl::GetFlag(FLAGS_collectives);
  if (list == "all") {
    c.collectives.assign(std::begin(kAllCollectives), std::end(kAllCollectives));
  } else {
    for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
      name = absl::StripAsciiWhitespace(name);
      if (std::find(std::begin(kAllCollectives), std::end(kAllCollectives), name) ==
          std::end(kAllCollectives)) {
        fail(kBadInput, absl::StrCat("--collectives: unknown collective '", name,
                                     "': expected all or a comma-separated list of all_reduce, all_gather, "
                                     "reduce_scatter, all_to_all, broadcast"));
      }
      if (std::find(c.collectives.begin(), c.collectives.end(), name) == c.collectives.end()) {
        c.collectives.emplace_back(name);
      }
    }
    if (c.collectives.empty())
      fail(kBadInput, "--collectives is empty: expected all or a comma-separated list");
  }
  const std::string type = absl::GetFlag(FLAGS_type);
  if (type == "f32") {
    c.type = DataType::kF32;
  } else if (type == "i32") {
    c.type = DataType::kI32;
  } else {
    fail(kBadInput, absl::StrCat("--type '", type, "': expected f32 or i32"));
  }
  c.out = absl::GetFlag(FLAGS_out);
  // The JSON is written by rank 0 at the end: a path it cannot write is refused now.
  if (!cli::secondary_rank()) {
    if (absl::Status s = cli::check_output_file("out", c.out); !s.ok()) fail(kBadInput, std::string(s.message()));
  }
  c.check = absl::GetFlag(FLAGS_check);
  return c;
}

int gpu_count() {
#ifdef MTC_COMM_HAVE_NCCL
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

// local_rank: this rank's index on its machine (which GPU it takes).
int local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

// max_over_ranks: the slowest rank's figure (the time every rank waits for).
double max_over_ranks(double v) {
#ifdef MTC_COMM_HAVE_MPI
  if (comm::mpi_initialized()) {
    double m = v;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
  }
#endif
  return v;
}

// Buffers: send and recv of max_bytes each, in the backend's memory.
class Buffers {
 public:
  Buffers(size_t bytes, bool device) : device_(device) {
    if (device) {
#ifdef MTC_COMM_HAVE_NCCL
      if (cudaMalloc(&send_, bytes) != cudaSuccess || cudaMalloc(&recv_, bytes) != cudaSuccess ||
          cudaMemset(send_, 0, bytes) != cudaSuccess) {
        comm::abort_job(kFailed,
                        absl::StrCat(kTool, ": error: cannot allocate 2 x ", bytes, " bytes on the GPU"));
      }
#endif
    } else {
      host_send_.assign(bytes / 4 + 1, 1);  // ones: an i32 or f32 pattern alike, nothing overflows
      host_recv_.assign(bytes / 4 + 1, 0);
      send_ = host_send_.data();
      recv_ = host_recv_.data();
    }
  }
  ~Buffers() {
#ifdef MTC_COMM_HAVE_NCCL
    if (device_) {
      cudaFree(send_);
      cudaFree(recv_);
    }
#endif
  }
  void* send() const { return send_; }
  void* recv() const { return recv_; }

 private:
  bool device_;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  std::vector<int32_t> host_send_, host_recv_;
};

std::shared_ptr<comm::Work> issue(Communicator& c, const std::string& name, const Buffers& b, size_t count,
                                  DataType t) {
  if (name == "all_reduce") return c.all_reduce(b.send(), b.recv(), count, t, comm::ReduceOp::kSum);
  if (name == "all_gather") return c.all_gather(b.send(), b.recv(), count, t);
  if (name == "reduce_scatter") return c.reduce_scatter(b.send(), b.recv(), count, t, comm::ReduceOp::kSum);
  if (name == "all_to_all") return c.all_to_all(b.send(), b.recv(), count, t);
  return c.broadcast(b.send(), count, t, 0);
}

struct Fit {
  double alpha_us = 0, beta_us_per_byte = 0;
  bool clamped = false;
};

// fit: time_us = alpha + beta * bytes by least squares on the relative error (each
// point weighted by 1/time^2). Plain least squares over sizes from bytes to MiB lets the
// largest sizes alone set the line, and alpha, the cost of a small message, comes out
// near zero or negative; relative errors make every size count alike. A negative
// coefficient (noise can tilt the line) is meaningless to a cost model: it is set to 0
// and the other refitted alone.
Fit fit(const std::vector<std::pair<double, double>>& pts) {
  Fit f;
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : pts) {
    const double w = 1.0 / std::max(y * y, 1e-12);
    sw += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  if (pts.empty()) return f;
  const double den = sw * sxx - sx * sx;
  if (pts.size() < 2 || den <= 0) {
    f.alpha_us = sy / sw;
    return f;
  }
  f.beta_us_per_byte = (sw * sxy - sx * sy) / den;
  f.alpha_us = (sy - f.beta_us_per_byte * sx) / sw;
  if (f.alpha_us < 0) {
    f.alpha_us = 0;
    f.beta_us_per_byte = sxy / sxx;
    f.clamped = true;
  }
  if (f.beta_us_per_byte < 0) {
    f.beta_us_per_byte = 0;
    f.alpha_us = sy / sw;
    f.clamped = true;
  }
  return f;
}

int run(const Config& cfg, int argc, char** argv) {
  if (absl::Status s = comm::init(&argc, &argv); !s.ok()) fail(kFailed, std::string(s.message()));

  comm::CommOptions opts;
  opts.check_arguments = cfg.check;
  if (cfg.backend == "local") {
    opts.backend = Backend::kLocal;
  } else if (cfg.backend == "mpi") {
    opts.backend = Backend::kMpi;
  } else if (cfg.backend == "nccl") {
    opts.backend = Backend::kNccl;
  } else {
    opts.backend = gpu_count() > 0 && comm::built_backends().find("nccl") != std::string::npos
                       ? Backend::kNccl
                   : comm::mpi_initialized() ? Backend::kMpi
                                             : Backend::kLocal;
  }
  if (opts.backend == Backend::kNccl && gpu_count() > 0) opts.device_ordinal = local_rank() % gpu_count();
  absl::StatusOr<std::shared_ptr<Communicator>> made = comm::create(opts);
  if (!made.ok()) {
    comm::finalize();
    fail(kFailed, std::string(made.status().message()));
  }
  Communicator& c = **made;
  const int n = c.world_size();
  const bool root = c.rank() == 0;
  const size_t es = comm::data_type_size(cfg.type);
  const char* type_name = comm::data_type_name(cfg.type);
  Buffers buffers(cfg.max_bytes + es * n, c.device_memory());

  // The model: one line per collective, so that a reader of the file sees the fits.
  std::vector<std::pair<std::string, nlohmann::ordered_json>> fits;
  if (root) {
    std::printf(
        "# %s: backend %s, %d rank%s, %s, %d iterations after %d warm-up; time: the mean per iteration of "
        "the slowest rank\n",
        kTool, comm::backend_name(c.backend()), n, n == 1 ? "" : "s", type_name, cfg.iters, cfg.warmup);
  }
  for (const std::string& name : cfg.collectives) {
    if (root) {
      std::printf("\n# %s%s\n", name.c_str(),
                  name == "all_reduce" || name == "reduce_scatter" ? " (sum)"
                  : name == "broadcast"                            ? " (root 0)"
                                                                   : "");
      std::printf("# %12s %12s %6s %12s %12s %12s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)",
                  "busbw(GB/s)");
    }
    const double factor = busbw_factor(name, n);
    std::vector<std::pair<double, double>> points;  // (bytes, us)
    uint64_t last_size = 0;
    for (uint64_t want = cfg.min_bytes; want <= cfg.max_bytes; want *= cfg.step_factor) {
      // count: elements per call (per block for the blocked collectives); size: the bytes
      // nccl-tests prints (the whole gathered or scattered buffer).
      const size_t elements = want / es;
      const size_t count = blocked(name) ? elements / n : elements;
      const uint64_t size = static_cast<uint64_t>(count) * es * (blocked(name) ? n : 1);
      if (count > 0 && size != last_size) {
        last_size = size;
        for (int i = 0; i < cfg.warmup; ++i) {
          if (absl::Status s = issue(c, name, buffers, count, cfg.type)->wait(); !s.ok()) {
            comm::abort_job(kFailed, absl::StrCat(kTool, ": error: ", s.message()));
          }
        }
        if (absl::Status s = c.barrier()->wait(); !s.ok())
          comm::abort_job(kFailed, absl::StrCat(kTool, ": error: ", s.message()));
        std::vector<std::shared_ptr<comm::Work>> works;
        works.reserve(cfg.iters);
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < cfg.iters; ++i) works.push_back(issue(c, name, buffers, count, cfg.type));
        for (auto& w : works) {
          if (absl::Status s = w->wait(); !s.ok())
            comm::abort_job(kFailed, absl::StrCat(kTool, ": error: ", s.message()));
        }
        const double mine =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
            cfg.iters;
        const double us = max_over_ranks(mine);
        const double algbw = static_cast<double>(size) / us / 1e3;  // bytes per us = MB/s
        points.emplace_back(static_cast<double>(size), us);
        if (root) {
          std::printf("  %12llu %12llu %6s %12.2f %12.3f %12.3f\n", static_cast<unsigned long long>(size),
                      static_cast<unsigned long long>(size / es), type_name, us, algbw, algbw * factor);
        }
      }
      if (want > cfg.max_bytes / cfg.step_factor) break;  // the next step would pass the end (or overflow)
    }
    const Fit f = fit(points);
    if (root) {
      // 1/beta in bytes per us is MB/s; a flat line (beta 0) has no bandwidth to show.
      std::string bw = "no size dependence";
      if (f.beta_us_per_byte > 0) {
        const double gbps = 1e-3 / f.beta_us_per_byte;
        bw = absl::StrFormat("1/beta = %.3f GB/s, as bus bandwidth %.3f GB/s", gbps, gbps * factor);
      }
      std::printf("# fit %s: time_us = %.3f + %.6g * bytes (%s)%s\n", name.c_str(), f.alpha_us,
                  f.beta_us_per_byte, bw.c_str(), f.clamped ? "; a negative coefficient was set to 0" : "");
    }
    nlohmann::ordered_json entry;
    entry["alpha_us"] = f.alpha_us;
    entry["beta_us_per_byte"] = f.beta_us_per_byte;
    entry["busbw_factor"] = factor;
    entry["points"] = nlohmann::ordered_json::array();
    for (auto [x, y] : points)
      entry["points"].push_back({static_cast<uint64_t>(x), std::round(y * 1e3) / 1e3});
    fits.emplace_back(name, std::move(entry));
  }

  int status = 0;
  if (root) {
    const std::string tmp = cfg.out + ".tmp";
    std::ofstream file(tmp);
    file << "{\n  \"backend\": " << nlohmann::json(comm::backend_name(c.backend())).dump()
         << ",\n  \"world_size\": " << n << ",\n  \"type\": " << nlohmann::json(type_name).dump()
         << ",\n  \"collectives\": {";
    for (size_t i = 0; i < fits.size(); ++i) {
      file << (i == 0 ? "\n    " : ",\n    ") << nlohmann::json(fits[i].first).dump() << ": "
           << fits[i].second.dump();
    }
    file << "\n  }\n}\n";
    file.close();
    if (!file || std::rename(tmp.c_str(), cfg.out.c_str()) != 0) {
      std::fprintf(stderr, "%s: error: cannot write %s\n", kTool, cfg.out.c_str());
      status = kFailed;
    } else {
      std::printf("\n# wrote %s\n", cfg.out.c_str());
    }
  }
  made->reset();
  comm::finalize();
  return status;
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  mtc::cli::parse_flags(mtc::kTool, "mtc_bench_comm",
                        "times comm/'s collectives over message sizes and fits an alpha-beta model.\n"
                        "  mtc-bench-comm [--flags]                      one rank (local backend)\n"
                        "  mpirun -np N mtc-bench-comm [--flags]         N ranks (mpi, or nccl with GPUs)",
                        argc, argv);
  const mtc::Config cfg = mtc::read_flags();
  return mtc::run(cfg, argc, argv);
}
