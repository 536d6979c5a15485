#include "partition/cost.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mtc/status.h"

namespace mtc::partition {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Note [Preempted calls]
// On ranks that share cores a call is now and then taken off its core for a whole time
// slice of the OS, milliseconds, whatever its own length: in one warm-up of GPT-2 small
// under --dtp=auto (4 ranks, 2 cores) 47 calls of the attention's `scale` took 15-78 us
// and one 12,189 us, so their mean (277 us) priced the op at 12 times what its later calls
// took (24 us); two `softmax` calls of 24 took 3.7 ms against 584-711 us for the rest.
// Such a call says nothing about the op, and how many of them a later iteration meets is
// chance, so fit_rates leaves out of a shape's mean every call slower than kPreempted
// times the shape's median and by more than kTimeSliceUs. The sharing itself moves a
// call's time by up to 2x (a core to itself or half of one), and a small op's calls vary
// by more than 4x without losing a slice; both stay in the mean (with the 4x rule alone,
// VGG-16's prediction error was 20.3% and 20.1% against 15.1% and 16.6% with every call;
// docs/dtp.md, "What auto measures"). An op longer than a time slice is slowed by at most
// 2x by one, and keeps it.
constexpr double kPreempted = 4;
constexpr double kTimeSliceUs = 1000;

// term: x / rate, with an infinite rate dropping the term and a rate of 0 (unset) making
// any work infinitely slow.
double term(double x, double rate) {
  if (std::isinf(rate)) return 0;
  if (rate <= 0) return x > 0 ? kInf : 0;
  return x / rate;
}

// solve: the n x n system m·x = v by Gaussian elimination with partial pivoting; false
// when singular (a pivot below 1e-12 of the largest diagonal entry).
bool solve(std::vector<std::vector<double>> m, std::vector<double> v, std::vector<double>& x) {
  const size_t n = v.size();
  double scale = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(m[i][i]));
  if (scale == 0) return false;
  for (size_t col = 0; col < n; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < n; ++r)
      if (std::abs(m[r][col]) > std::abs(m[piv][col])) piv = r;
    if (std::abs(m[piv][col]) < 1e-12 * scale) return false;
    std::swap(m[piv], m[col]);
    std::swap(v[piv], v[col]);
    for (size_t r = col + 1; r < n; ++r) {
      const double f = m[r][col] / m[col][col];
      for (size_t k = col; k < n; ++k) m[r][k] -= f * m[col][k];
      v[r] -= f * v[col];
    }
  }
  x.assign(n, 0);
  for (size_t i = n; i-- > 0;) {
    double s = v[i];
    for (size_t k = i + 1; k < n; ++k) s -= m[i][k] * x[k];
    x[i] = s / m[i][i];
  }
  return true;
}

std::optional<Collective> collective_of(Step s) {
  switch (s) {
    case Step::kAllReduce: return Collective::kAllReduce;
    case Step::kAllGather: return Collective::kAllGather;
    case Step::kReduceScatter: return Collective::kReduceScatter;
    case Step::kAllToAll: return Collective::kAllToAll;
    default: return std::nullopt;
  }
}

// backward_of: the collective a conversion's backward runs (docs/dtp.md, Conversions).
Collective backward_of(Collective c) {
  switch (c) {
    case Collective::kAllGather: return Collective::kReduceScatter;
    case Collective::kReduceScatter: return Collective::kAllGather;
    case Collective::kAllReduce: return Collective::kAllReduce;
    case Collective::kAllToAll: return Collective::kAllToAll;
  }
  return c;
}

std::string mib(double bytes) { return absl::StrFormat("%.0f bytes (%.1f MiB)", bytes, bytes / (1 << 20)); }

}  // namespace

// ---------------------------------------------------------------------------------------

double Rates::time_us(double flops, double bytes) const {
  return term(flops, flops_per_us) + term(bytes, bytes_per_us) + overhead_us;
}

Rates Rates::cpu_default() { return {2e4, 1e4, 5}; }

absl::StatusOr<Rates> fit_rates(std::span<const RateSample> samples) {
  if (samples.empty()) return absl::InvalidArgumentError("fit_rates: no sample");
  for (const RateSample& s : samples) {
    if (!(s.us > 0) || !std::isfinite(s.us) || !(s.flops >= 0) || !std::isfinite(s.flops) || !(s.bytes >= 0) ||
        !std::isfinite(s.bytes)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "fit_rates: a sample needs flops >= 0, bytes >= 0 and us > 0, all finite; got flops=%g bytes=%g us=%g",
          s.flops, s.bytes, s.us));
    }
  }
  // Calls of one shape (the same flops and bytes) become one sample at their mean time.
  // The model predicts a call's mean time, which is what an iteration's time adds up. The
  // relative-error fit below would otherwise weight each call by its rate (the rate it
  // finds is the rates' mean weighted by themselves) and follow the fast calls: on 4 ranks
  // sharing 2 cores a GEMM runs at the whole core's rate in some calls and at half of it in
  // others, and the fit found 78 GFLOP/s where the calls averaged 45. Calls more than
  // kPreempted times the shape's median and kTimeSliceUs above it are left out of the mean
  // (Note [Preempted calls]).
  std::map<std::pair<double, double>, std::vector<double>> by_shape;
  for (const RateSample& s : samples) by_shape[{s.flops, s.bytes}].push_back(s.us);
  std::vector<RateSample> means;
  means.reserve(by_shape.size());
  for (auto& [shape, us] : by_shape) {
    std::sort(us.begin(), us.end());
    const size_t n = us.size();
    const double median = n % 2 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2;
    double sum = 0;
    int kept = 0;
    for (double u : us) {
      if (u > kPreempted * median && u > median + kTimeSliceUs) break;  // sorted: the rest are slower still
      sum += u;
      ++kept;
    }
    means.push_back({shape.first, shape.second, sum / kept});  // kept >= 1: the fastest is within
  }
  samples = means;
  // Features (flops, bytes, 1), each column scaled by its largest value so the normal
  // equations stay well conditioned (FLOPs reach 1e10, the constant is 1).
  std::array<double, 3> col_scale{0, 0, 1};
  for (const RateSample& s : samples) {
    col_scale[0] = std::max(col_scale[0], s.flops);
    col_scale[1] = std::max(col_scale[1], s.bytes);
  }
  auto feature = [&](const RateSample& s, int j) {
    const double v = j == 0 ? s.flops : j == 1 ? s.bytes : 1.0;
    return col_scale[j] > 0 ? v / col_scale[j] : 0.0;
  };
  auto residual = [&](const std::array<double, 3>& x) {
    double r = 0;
    for (const RateSample& s : samples) {
      double pred = 0;
      for (int j = 0; j < 3; ++j) pred += x[j] * feature(s, j);
      const double e = (pred - s.us) / s.us;  // relative error: weight 1/us²
      r += e * e;
    }
    return r;
  };
  std::array<double, 3> best{0, 0, 0};
  double best_r = residual(best);
  for (int subset = 1; subset < 8; ++subset) {
    std::vector<int> cols;
    for (int j = 0; j < 3; ++j)
      if (subset & (1 << j)) cols.push_back(j);
    const size_t n = cols.size();
    std::vector<std::vector<double>> m(n, std::vector<double>(n, 0));
    std::vector<double> v(n, 0);
    for (const RateSample& s : samples) {
      const double w = 1.0 / (s.us * s.us);
      for (size_t a = 0; a < n; ++a) {
        v[a] += w * feature(s, cols[a]) * s.us;
        for (size_t b = 0; b < n; ++b) m[a][b] += w * feature(s, cols[a]) * feature(s, cols[b]);
      }
    }
    std::vector<double> x;
    if (!solve(m, v, x)) continue;
    std::array<double, 3> full{0, 0, 0};
    bool feasible = true;
    for (size_t a = 0; a < n; ++a) {
      if (x[a] < 0) feasible = false;
      full[cols[a]] = x[a];
    }
    if (!feasible) continue;
    const double r = residual(full);
    if (r < best_r) best_r = r, best = full;
  }
  Rates out;
  const double a = col_scale[0] > 0 ? best[0] / col_scale[0] : 0;  // us per FLOP
  const double b = col_scale[1] > 0 ? best[1] / col_scale[1] : 0;  // us per byte
  out.flops_per_us = a > 0 ? 1 / a : kInf;
  out.bytes_per_us = b > 0 ? 1 / b : kInf;
  out.overhead_us = best[2];
  return out;
}

absl::Status RateTable::fit(absl::string_view family, std::span<const RateSample> samples) {
  auto r = fit_rates(samples);
  if (!r.ok()) return absl::Status(r.status().code(), absl::StrCat("op family ", family, ": ", r.status().message()));
  set(family, *r);
  return absl::OkStatus();
}

const Rates& RateTable::get(absl::string_view family) const {
  auto it = rates_.find(family);
  return it == rates_.end() ? fallback_ : it->second;
}

// ---------------------------------------------------------------------------------------

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
  }
  return "?";
}

double busbw_factor(Collective c, int p) {
  if (p <= 1) return 0;
  const double share = static_cast<double>(p - 1) / p;
  return c == Collective::kAllReduce ? 2 * share : share;
}

double collective_size_bytes(Collective c, double global_bytes, int p) {
  if (c == Collective::kAllToAll) return global_bytes / std::max(p, 1);
  return global_bytes;
}

double CollectiveModel::time_us(Collective c, double size_bytes, int p) const {
  return shared_call_us(c, size_bytes, p, 1.0);
}

// Note [Measured collective points]
// mtc-bench-comm's one line per collective (fitted on the relative error, so that small
// calls are priced right) misses the large ones on shared cores: on 4 ranks on 2 cores
// Open MPI's reduce_scatter measured 0.6 ms at 2 MiB, 8.6 ms at 8 MiB (the line: 2.9 ms)
// and 1.48 s at 128 MiB (the line: 46 ms), where the GPT's LM head reduce-scatters its
// Partial logits, 103 MB, and took 1.2-1.5 s (comm/'s MPI backend has since run large
// reduce-scatters itself, Note [Pairwise reduce-scatter] in comm/mpi.cc; a backend's
// curve still need not be one line). So where the file has the measured points a call is
// read off them: linear between the two sizes around it (each segment is an alpha-beta
// line of its own), past the largest along the last segment, below the smallest at its
// time. A time above a larger size's is noise (the 8-byte all_reduce measured 138 us, the
// 32-byte one 33 us) and is lowered to it, so that the price never falls as a call grows.
// At another world size the call is read at the size that moves as many bus bytes at the
// points' world size, the rescaling the lines make.
double CollectiveModel::shared_call_us(Collective c, double size_bytes, int p, double call_share) const {
  if (p <= 1) return 0;
  const Line& l = lines[static_cast<int>(c)];
  const Points& pt = points[static_cast<int>(c)];
  double fixed_us = l.alpha_us;
  double bytes_us = l.bus_us_per_byte * size_bytes * busbw_factor(c, p);
  if (!pt.at.empty()) {
    const auto& at = pt.at;
    const double s = size_bytes * busbw_factor(c, p) / busbw_factor(c, pt.world_size);
    fixed_us = at.front().second;
    double t = fixed_us;
    if (s > at.back().first) {
      const size_t n = at.size();
      const double slope = n >= 2 ? (at[n - 1].second - at[n - 2].second) / (at[n - 1].first - at[n - 2].first)
                                  : l.bus_us_per_byte * busbw_factor(c, pt.world_size);
      t = at.back().second + slope * (s - at.back().first);
    } else if (s > at.front().first) {
      const auto hi = std::lower_bound(at.begin(), at.end(), s,
                                       [](const std::pair<double, double>& a, double v) { return a.first < v; });
      const auto lo = hi - 1;
      t = lo->second + (hi->second - lo->second) * (s - lo->first) / (hi->first - lo->first);
    }
    bytes_us = t - fixed_us;
  }
  return bytes_us + std::clamp(call_share, 0.0, 1.0) * (fixed_us + per_call_us);
}

absl::Status CollectiveModel::calibrate(std::span<const Sample> samples) {
  if (samples.size() < kCalibrationCalls) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collective model: calibrate: %d measured collectives; expected at least %d", samples.size(), kCalibrationCalls));
  }
  std::vector<double> excess;
  excess.reserve(samples.size());
  for (const Sample& s : samples) {
    if (!(s.predicted_us > 0) || !(s.us > 0) || !std::isfinite(s.predicted_us) || !std::isfinite(s.us)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "collective model: calibrate: a sample needs predicted_us > 0 and us > 0, both finite; got %g and %g",
          s.predicted_us, s.us));
    }
    excess.push_back(s.us - s.predicted_us);
  }
  std::sort(excess.begin(), excess.end());
  const size_t n = excess.size();
  const double median = n % 2 ? excess[n / 2] : (excess[n / 2 - 1] + excess[n / 2]) / 2;
  per_call_us = std::max(0.0, median);
  return absl::OkStatus();
}

double conversion_us(Conversion c, double global_bytes, int parts, const CollectiveModel& m) {
  if (c.step == Step::kUnsupported) return kInf;
  const std::optional<Collective> k = collective_of(c.step);
  return k ? m.time_us(*k, collective_size_bytes(*k, global_bytes, parts), parts) : 0;
}

absl::Status CollectiveModel::set_fit(Collective c, double alpha_us, double beta_us_per_byte, int world_size) {
  if (world_size < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective model: ", collective_name(c), " fitted at world_size ", world_size, "; needs >= 2"));
  }
  if (!(alpha_us >= 0) || !(beta_us_per_byte >= 0) || !std::isfinite(alpha_us) || !std::isfinite(beta_us_per_byte)) {
    return absl::InvalidArgumentError(absl::StrFormat("collective model: %s needs alpha_us >= 0 and "
                                                      "beta_us_per_byte >= 0; got %g and %g",
                                                      collective_name(c), alpha_us, beta_us_per_byte));
  }
  lines[static_cast<int>(c)] = {alpha_us, beta_us_per_byte / busbw_factor(c, world_size)};
  return absl::OkStatus();
}

absl::Status CollectiveModel::set_points(Collective c, std::span<const std::pair<double, double>> at,
                                         int world_size) {
  const std::string name = collective_name(c);
  if (world_size < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective model: ", name, " points measured at world_size ", world_size, "; needs >= 2"));
  }
  if (at.empty()) return absl::InvalidArgumentError(absl::StrCat("collective model: ", name, ": no points"));
  for (size_t i = 0; i < at.size(); ++i) {
    const auto [bytes, us] = at[i];
    if (!(bytes > 0) || !(us > 0) || !std::isfinite(bytes) || !std::isfinite(us)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "collective model: %s point %d needs bytes > 0 and us > 0, both finite; got [%g, %g]", name, i, bytes, us));
    }
    if (i > 0 && !(bytes > at[i - 1].first)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "collective model: %s points need increasing sizes; point %d has %g bytes after %g", name, i, bytes,
          at[i - 1].first));
    }
  }
  Points& pt = points[static_cast<int>(c)];
  pt.world_size = world_size;
  pt.at.assign(at.begin(), at.end());
  for (size_t i = pt.at.size() - 1; i-- > 0;) pt.at[i].second = std::min(pt.at[i].second, pt.at[i + 1].second);
  return absl::OkStatus();
}

CollectiveModel CollectiveModel::mpi_cpu_default() {
  CollectiveModel m;
  // docs/comm.md's sample: all_reduce alpha 35.1 us, beta 0.00237 us/B at 4 ranks (factor 1.5).
  const Line l{35.1, 0.00237 / 1.5};
  m.lines = {l, l, l, l};
  return m;
}

CollectiveModel CollectiveModel::nccl_default() {
  CollectiveModel m;
  const Line ring{10.0, 1.0 / 450e3};   // 450 GB/s bus bandwidth = 450e3 bytes/us
  const Line a2a{10.0, 1.0 / 300e3};    // 300 GB/s
  m.lines = {ring, ring, ring, a2a};
  return m;
}

namespace {
// A reader for the few shapes of mtc-bench-comm's JSON (docs/comm.md), with no library:
// numbers after a key, an object's extent, and the points' array of pairs. No string in
// that file holds a brace or a bracket.

// number_after: the number following `"key":` in text.
std::optional<double> number_after(absl::string_view text, absl::string_view key) {
  const std::string k = absl::StrCat("\"", key, "\"");
  size_t i = text.find(k);
  if (i == absl::string_view::npos) return std::nullopt;
  i = text.find(':', i + k.size());
  if (i == absl::string_view::npos) return std::nullopt;
  const std::string rest(text.substr(i + 1, 64));
  char* stop = nullptr;
  const double v = std::strtod(rest.c_str(), &stop);
  if (stop == rest.c_str()) return std::nullopt;
  return v;
}

// object_after: the object `{...}` that is the value of the key at `at` (the text from its
// `{` to the matching `}`), empty when the value is not an object or does not close.
absl::string_view object_after(absl::string_view text, size_t at) {
  const size_t colon = text.find(':', at);
  if (colon == absl::string_view::npos) return {};
  const size_t open = text.find_first_not_of(" \t\r\n", colon + 1);
  if (open == absl::string_view::npos || text[open] != '{') return {};
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return text.substr(open, i + 1 - open);
  }
  return {};
}

// points_in: the `"points": [[bytes, us], ...]` of one collective's object; nullopt when the
// key is there but its value is not such an array, an empty vector when the key is absent.
std::optional<std::vector<std::pair<double, double>>> points_in(absl::string_view object) {
  std::vector<std::pair<double, double>> at;
  size_t i = object.find("\"points\"");
  if (i == absl::string_view::npos) return at;
  i = object.find(':', i);
  const std::string rest(object.substr(i == absl::string_view::npos ? object.size() : i + 1));
  const char* p = rest.c_str();
  auto skip = [&p] {
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') ++p;
  };
  auto number = [&p](double* v) {
    char* stop = nullptr;
    *v = std::strtod(p, &stop);
    if (stop == p) return false;
    p = stop;
    return true;
  };
  skip();
  if (*p++ != '[') return std::nullopt;
  skip();
  if (*p == ']') return at;
  while (true) {
    double bytes = 0, us = 0;
    skip();
    if (*p++ != '[') return std::nullopt;
    skip();
    if (!number(&bytes)) return std::nullopt;
    skip();
    if (*p++ != ',') return std::nullopt;
    skip();
    if (!number(&us)) return std::nullopt;
    skip();
    if (*p++ != ']') return std::nullopt;
    at.emplace_back(bytes, us);
    skip();
    if (*p == ']') return at;
    if (*p++ != ',') return std::nullopt;
  }
}
}  // namespace

absl::StatusOr<CollectiveModel> CollectiveModel::from_bench_json(absl::string_view text, const CollectiveModel& base) {
  std::optional<double> ws = number_after(text, "world_size");
  if (!ws || *ws < 2) {
    return absl::InvalidArgumentError("mtc-bench-comm JSON: expected \"world_size\": N with N >= 2");
  }
  const int world_size = static_cast<int>(*ws);
  CollectiveModel m = base;
  int found = 0;
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll}) {
    const size_t at = text.find(absl::StrCat("\"", collective_name(c), "\""));
    if (at == absl::string_view::npos) continue;
    const std::string what = absl::StrCat("mtc-bench-comm JSON: ", collective_name(c), ": ");
    // Read within the collective's own object, so that a figure it lacks is not taken
    // from the next collective's.
    const absl::string_view object = object_after(text, at);
    std::optional<double> a = number_after(object, "alpha_us");
    std::optional<double> b = number_after(object, "beta_us_per_byte");
    if (!a || !b) return absl::InvalidArgumentError(what + "expected alpha_us and beta_us_per_byte numbers");
    MTC_RETURN_IF_ERROR(m.set_fit(c, *a, *b, world_size));
    std::optional<std::vector<std::pair<double, double>>> points = points_in(object);
    if (!points) return absl::InvalidArgumentError(what + "expected \"points\": [[bytes, us], ...]");
    m.points[static_cast<int>(c)] = {};
    if (!points->empty()) {
      if (absl::Status s = m.set_points(c, *points, world_size); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("mtc-bench-comm JSON: ", s.message()));
      }
    }
    ++found;
  }
  if (found == 0) {
    return absl::InvalidArgumentError(
        "mtc-bench-comm JSON: no collective found; expected all_reduce, all_gather, reduce_scatter or all_to_all");
  }
  return m;
}

// ---------------------------------------------------------------------------------------

WeightOp WeightOp::linear(int64_t batch, int64_t in, int64_t out, int64_t elem_bytes) {
  WeightOp op;
  op.batch = batch, op.in = in, op.out = out, op.elem_bytes = elem_bytes;
  return op;
}

WeightOp WeightOp::conv2d(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                          int64_t oh, int64_t ow, int64_t elem_bytes) {
  WeightOp op;
  op.batch = n, op.in = c, op.out = oc, op.elem_bytes = elem_bytes;
  op.x_per_elem = h * w, op.y_per_elem = oh * ow, op.w_per_elem = kh * kw;
  return op;
}

double WeightOp::w_bytes() const { return double(in) * double(out) * double(w_per_elem) * double(elem_bytes); }
double WeightOp::x_bytes() const { return double(batch) * double(in) * double(x_per_elem) * double(elem_bytes); }
double WeightOp::y_bytes() const { return double(batch) * double(out) * double(y_per_elem) * double(elem_bytes); }
double WeightOp::flops() const {
  return 2.0 * double(batch) * double(in) * double(out) * double(w_per_elem) * double(y_per_elem);
}

Placement x_placement_for(const WeightOp& op, Mode m) {
  switch (m) {
    case Mode::kP1:
    case Mode::kP2: return Placement::S(0);
    case Mode::kP3: return Placement::S(op.channel_dim);
    default: return Placement::R();
  }
}

absl::StatusOr<ModeBreakdown> mode_breakdown(const WeightOp& op, Mode m, Placement x_have, Placement y_next,
                                             const CostContext& ctx) {
  if (m != Mode::kP1 && m != Mode::kP2 && m != Mode::kP3 && m != Mode::kP4) {
    return absl::InvalidArgumentError(absl::StrCat("cost: mode ", mode_name(m), " is not one of p1..p4"));
  }
  if (ctx.parts < 1) return absl::InvalidArgumentError(absl::StrCat("cost: ", ctx.parts, " ranks; needs >= 1"));
  if (op.batch <= 0 || op.in <= 0 || op.out <= 0 || op.x_per_elem <= 0 || op.y_per_elem <= 0 || op.w_per_elem <= 0 ||
      op.elem_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("cost: op extents must be positive: B=", op.batch, " c=", op.in,
                                                   " n=", op.out));
  }
  const int p = ctx.parts;
  const double e = double(op.elem_bytes);
  auto largest = [&](int64_t n) { return double(shard_range(n, p, 0).size); };  // the slowest rank's shard
  ModeBreakdown b;
  b.mode = m;

  // The rank's shards: X [Bl, cl], W [cl, nl], Y [Bl, nl].
  double bl = double(op.batch), cl = double(op.in), nl = double(op.out);
  if (m == Mode::kP1 || m == Mode::kP2) bl = largest(op.batch);
  if (m == Mode::kP3) cl = largest(op.in);
  if (m == Mode::kP4) nl = largest(op.out);
  const double x_l = bl * cl * double(op.x_per_elem) * e;
  const double w_l = cl * nl * double(op.w_per_elem) * e;
  const double y_l = bl * nl * double(op.y_per_elem) * e;
  const double flops_l = 2.0 * bl * cl * nl * double(op.w_per_elem) * double(op.y_per_elem);

  // Compute: the forward, and in training dW = X^T·dY and (when X needs it) dX = dY·W^T,
  // each with the forward's FLOPs and the bytes of its three operands.
  const int matmuls = 1 + (ctx.backward ? 1 + (ctx.x_needs_grad ? 1 : 0) : 0);
  b.compute_us = matmuls * ctx.rates.time_us(flops_l, x_l + w_l + y_l);

  auto call = [&](Collective c, double global_bytes, double& into_us) {
    const double s = collective_size_bytes(c, global_bytes, p);
    into_us += ctx.comm.time_us(c, s, p);
    b.sent_bytes += s * busbw_factor(c, p);
  };

  // X's conversion to the placement the mode needs, and its backward.
  const Conversion conv = plan_conversion(x_have, x_placement_for(op, m));
  if (conv.step == Step::kUnsupported) {
    return absl::InvalidArgumentError(absl::StrCat("cost: X held as ", x_have.str(), " cannot be converted to ",
                                                   x_placement_for(op, m).str(), " for mode ", mode_name(m)));
  }
  if (auto c = collective_of(conv.step)) {
    call(*c, op.x_bytes(), b.conversion_us);
    if (ctx.backward && ctx.x_needs_grad) call(backward_of(*c), op.x_bytes(), b.conversion_us);
  }

  // The mode's own collectives and its memory.
  const double w = op.w_bytes();
  double w_stored = w;
  switch (m) {
    case Mode::kP1:
      if (ctx.backward) call(Collective::kAllReduce, w, b.collective_us);  // dW
      break;
    case Mode::kP2:
      w_stored = largest(op.in) * double(op.out) * double(op.w_per_elem) * e;
      call(Collective::kAllGather, w, b.collective_us);  // W for the forward, kept for the backward
      b.buffer_bytes += w;
      if (ctx.backward) {
        call(Collective::kReduceScatter, w, b.collective_us);  // dW
        b.buffer_bytes += w;                                   // the whole dW before its reduce-scatter
      }
      break;
    case Mode::kP3: {
      w_stored = w_l;
      const Conversion yc = plan_conversion(Placement::P(), y_next);
      if (yc.step == Step::kUnsupported) {
        return absl::InvalidArgumentError(
            absl::StrCat("cost: a Partial Y cannot be converted to ", y_next.str()));
      }
      if (auto c = collective_of(yc.step)) {
        call(*c, op.y_bytes(), b.collective_us);
        if (ctx.backward) call(backward_of(*c), op.y_bytes(), b.collective_us);
        b.buffer_bytes += y_next.split() ? op.y_bytes() / p : op.y_bytes();  // the converted Y
      }
      break;
    }
    case Mode::kP4:
      w_stored = w_l;
      // dX: each rank's dY_l·W_l^T is a share of dX; when X's conversion has a backward it
      // sums them, otherwise they are summed by an all-reduce (here or upstream).
      if (ctx.backward && ctx.x_needs_grad && !collective_of(conv.step)) {
        call(Collective::kAllReduce, op.x_bytes(), b.collective_us);
      }
      break;
    default: break;
  }
  b.state_bytes = w_stored * (2 + ctx.optimizer_states);
  b.grad_bytes = w_stored;
  b.activation_bytes = x_l + y_l;
  return b;
}

absl::StatusOr<ModeCost> mode_cost(const WeightOp& op, Mode m, Placement x_have, Placement y_next,
                                   const CostContext& ctx) {
  auto b = mode_breakdown(op, m, x_have, y_next, ctx);
  if (!b.ok()) return b.status();
  return b->total();
}

// ---------------------------------------------------------------------------------------

absl::StatusOr<Mode> choose_mode(std::span<const ModeOption> options, double budget_bytes, double lambda,
                                 absl::string_view op_name) {
  std::vector<ModeCost> costs;
  std::vector<std::string> names;
  int reference = -1;
  for (const ModeOption& o : options) {
    if (o.mode == Mode::kP1 && reference < 0) reference = static_cast<int>(costs.size());
    costs.push_back(o.cost);
    names.push_back(mode_name(o.mode));
  }
  MTC_ASSIGN_OR_RETURN(size_t i, choose_index(costs, names, budget_bytes, lambda, op_name, reference));
  return options[i].mode;
}

// ---------------------------------------------------------------------------------------

namespace {

absl::Status check_context(const OpContext& ctx) {
  if (ctx.parts < 1) return absl::InvalidArgumentError(absl::StrCat("cost: ", ctx.parts, " ranks; needs >= 1"));
  return absl::OkStatus();
}

// activation_conversion: an activation's conversion have -> want, forward (and backward).
absl::Status activation_conversion(const InputTerm& in, const OpContext& ctx, double& fwd_us, double& bwd_us,
                                   double& sent) {
  const Conversion conv = plan_conversion(in.have, in.want);
  if (conv.step == Step::kUnsupported) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost: an input held as ", in.have.str(), " cannot be converted to ", in.want.str()));
  }
  if (auto c = collective_of(conv.step)) {
    const double s = collective_size_bytes(*c, in.global_bytes, ctx.parts);
    fwd_us += ctx.comm.time_us(*c, s, ctx.parts);
    sent += s * busbw_factor(*c, ctx.parts);
    if (ctx.training && in.needs_grad) {
      const Collective b = backward_of(*c);
      const double sb = collective_size_bytes(b, in.global_bytes, ctx.parts);
      bwd_us += ctx.comm.time_us(b, sb, ctx.parts);
      sent += sb * busbw_factor(b, ctx.parts);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModeBreakdown> signature_breakdown(const SignatureTerms& s, const OpContext& ctx) {
  MTC_RETURN_IF_ERROR(check_context(ctx));
  const int p = ctx.parts;
  ModeBreakdown b;
  const double op_us = ctx.rates.time_us(s.flops, s.bytes);
  b.compute_us = op_us * (ctx.training ? (s.weighted ? 3 : 2) : 1);
  // call: one collective of the op; share: its part of a call that carries other tensors.
  auto call = [&](Collective c, double global_bytes, double& into_us, double share = 1.0) {
    const double size = collective_size_bytes(c, global_bytes, p);
    into_us += ctx.comm.shared_call_us(c, size, p, share);
    b.sent_bytes += size * busbw_factor(c, p);
  };
  for (const InputTerm& in : s.inputs) {
    switch (in.holding) {
      case Holding::kActivation: {
        double bwd = 0;
        MTC_RETURN_IF_ERROR(activation_conversion(in, ctx, b.conversion_us, bwd, b.sent_bytes));
        b.conversion_us += bwd;
        b.activation_bytes += in.local_bytes;
        break;
      }
      case Holding::kParameter:
        b.state_bytes += in.local_bytes * (2 + ctx.optimizer_states);
        b.grad_bytes += in.local_bytes;
        if (ctx.training) {
          // The step reads the parameter, its gradient and its states and writes the
          // parameter and its states: (2 + 2·states) parameter-sized tensors.
          b.compute_us += ctx.step_rates.time_us(0, in.local_bytes * (2 + 2 * ctx.optimizer_states));
        }
        if (in.gather) {
          call(Collective::kAllGather, in.global_bytes, b.collective_us);
          b.buffer_bytes += in.global_bytes;
          if (ctx.training && in.needs_grad) {
            call(Collective::kReduceScatter, in.global_bytes, b.collective_us);
            b.buffer_bytes += in.global_bytes;
          }
        } else if (in.want.replicated() && ctx.training && in.needs_grad) {
          // Data parallel's all-reduce, in a bucket with other gradients (GradReducer).
          const double share = ctx.grad_bucket_bytes > 0 ? in.global_bytes / ctx.grad_bucket_bytes : 1.0;
          call(Collective::kAllReduce, in.global_bytes, b.collective_us, share);
        }
        break;
      case Holding::kBuffer: b.state_bytes += in.local_bytes; break;
    }
  }
  for (const OutputTerm& o : s.outputs) {
    b.activation_bytes += o.local_bytes;
    if (o.place.partial()) {
      call(Collective::kAllReduce, o.global_bytes, b.collective_us);
      if (ctx.training) call(Collective::kAllReduce, o.global_bytes, b.collective_us);
    }
  }
  return b;
}

absl::StatusOr<double> forward_us(const SignatureTerms& s, const OpContext& ctx) {
  MTC_RETURN_IF_ERROR(check_context(ctx));
  double us = ctx.rates.time_us(s.flops, s.bytes);
  double unused_bwd = 0, unused_sent = 0;
  OpContext fwd = ctx;
  fwd.training = false;
  for (const InputTerm& in : s.inputs) {
    if (in.holding == Holding::kActivation) {
      MTC_RETURN_IF_ERROR(activation_conversion(in, fwd, us, unused_bwd, unused_sent));
    } else if (in.holding == Holding::kParameter && in.gather) {
      us += ctx.comm.time_us(Collective::kAllGather, in.global_bytes, ctx.parts);
    }
  }
  return us;
}

double move_us(const InputTerm& in, const OpContext& ctx) {
  const Conversion conv = plan_conversion(in.have, in.want);
  if (conv.step == Step::kUnsupported) return kInf;
  auto c = collective_of(conv.step);
  if (!c) return 0;  // a local slice, or nothing
  const double tensors = in.holding == Holding::kParameter ? 1 + ctx.optimizer_states : 1;
  return tensors * ctx.comm.time_us(*c, collective_size_bytes(*c, in.global_bytes, ctx.parts), ctx.parts);
}

absl::StatusOr<size_t> choose_index(std::span<const ModeCost> costs, std::span<const std::string> names,
                                    double budget_bytes, double lambda, absl::string_view op_name, int reference) {
  if (!(lambda >= 0 && lambda <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("op %s: lambda %g is outside [0, 1]", op_name, lambda));
  }
  if (costs.empty()) return absl::InvalidArgumentError(absl::StrCat("op ", op_name, ": no mode to choose from"));
  std::vector<size_t> fit;
  size_t smallest = 0;
  for (size_t i = 0; i < costs.size(); ++i) {
    if (costs[i].bytes < costs[smallest].bytes) smallest = i;
    if (costs[i].bytes <= budget_bytes && std::isfinite(costs[i].time_us) && std::isfinite(costs[i].bytes)) {
      fit.push_back(i);
    }
  }
  if (fit.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "op ", op_name, ": no mode fits the budget of ", mib(budget_bytes), " per rank; the smallest, ",
        smallest < names.size() ? names[smallest] : absl::StrCat("option ", smallest), ", needs ",
        mib(costs[smallest].bytes)));
  }
  double m_ref = kInf, t_ref = kInf, m_max = 0, t_max = 0;
  for (size_t i : fit) {
    m_ref = std::min(m_ref, costs[i].bytes), t_ref = std::min(t_ref, costs[i].time_us);
    m_max = std::max(m_max, costs[i].bytes), t_max = std::max(t_max, costs[i].time_us);
  }
  if (reference >= 0 && std::find(fit.begin(), fit.end(), static_cast<size_t>(reference)) != fit.end()) {
    m_ref = costs[reference].bytes, t_ref = costs[reference].time_us;
  }
  if (m_ref <= 0) m_ref = m_max;
  if (t_ref <= 0) t_ref = t_max;
  auto norm = [](double x, double ref) { return ref > 0 ? x / ref : 0.0; };
  size_t best = fit[0];
  double best_score = kInf;
  for (size_t i : fit) {
    const double score = lambda * norm(costs[i].bytes, m_ref) + (1 - lambda) * norm(costs[i].time_us, t_ref);
    if (score < best_score || (score == best_score && costs[i].bytes < costs[best].bytes)) best = i, best_score = score;
  }
  return best;
}

}  // namespace mtc::partition
