// mtc-memplot: draws a run's memory timeline as an SVG from the Chrome trace mtc-train
// --chrome_trace writes (docs/metrics.md): the compute region's bytes over the run's time,
// stacked as persistent tensors (parameters, optimizer state), transient ones
// (activations, gradients, workspace) and, above what is resident, the evicted ones DTE
// swapped to host or dropped to recompute; the budget m* as a line; iterations as marks.
//
// The resident part follows the region's "allocated" counter, written at every allocation
// and free, so no peak is missed; the split into persistent and transient, and the evicted
// bytes, follow the "tensors" counter, written after each command that changed them. Each
// pixel column shows the highest resident total that fell in it (its split at that
// moment) and the highest evicted bytes. Exit 0: written; 2: a bad flag, or a file that is
// not a complete trace of mtc-train's (the error names it and what was expected).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, in, "", "the Chrome trace of a run (mtc-train --chrome_trace FILE)");
ABSL_FLAG(std::string, out, "", "the SVG to write (a temporary file renamed into place)");
ABSL_FLAG(std::string, title, "", "the picture's title (default: the trace's file name)");
ABSL_FLAG(std::string, iterations, "",
          "FIRST:LAST: draw only iterations FIRST to LAST (their marks, 1-based; default: the whole run)");
ABSL_FLAG(int, width, 1200, "the picture's width in pixels (600 to 4000)");
ABSL_FLAG(int, height, 600, "the picture's height in pixels (300 to 2000)");

namespace mtc {
namespace {

constexpr int kBadInput = 2;
[[noreturn]] void fail(const std::string& what) { cli::fail("mtc-memplot", kBadInput, what); }

// A moment of the timeline: the region's allocated bytes and the tensors' split.
struct State {
  double allocated = 0, persistent = 0, swapped = 0, dropped = 0;
  double resident_persistent() const { return std::min(persistent, allocated); }
  double evicted() const { return swapped + dropped; }
};
struct Sample {
  double ts = 0;  // microseconds since the trace began
  State s;
};
struct Mark {
  double ts = 0;
  int iteration = 0;
};

struct Trace {
  std::vector<Sample> samples;  // in time order, one per counter event that changes them
  std::vector<Mark> marks;
  double budget = 0;  // 0: none
  double end_ts = 0;  // the last event's end
  size_t ops = 0, recomputes = 0, copies = 0;
};

double number(const nlohmann::json& args, const char* key, const std::string& path, const char* event) {
  auto it = args.find(key);
  if (it == args.end() || !it->is_number()) {
    fail(absl::StrCat("--in ", path, ": a \"", event, "\" counter without a number \"", key,
                      "\": not a trace of mtc-train's"));
  }
  return it->get<double>();
}

Trace read_trace(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    fail(absl::StrCat("--in ", path, ": cannot be read",
                      access(absl::StrCat(path, ".partial").c_str(), F_OK) == 0
                          ? " (only " + path + ".partial exists: the run stopped before it closed its trace)"
                          : ""));
  }
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    fail(absl::StrCat("--in ", path, ": not JSON (a Chrome trace is one JSON object; a trace cut short is "
                      "not complete)"));
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array()) {
    fail(absl::StrCat("--in ", path, ": not a Chrome trace (expected an object with a \"traceEvents\" array)"));
  }
  Trace t;
  State now;
  bool saw_region = false, saw_tensors = false;
  for (const nlohmann::json& e : j["traceEvents"]) {
    if (!e.is_object() || !e.contains("ph") || !e.contains("name") || !e.contains("ts") || !e["ts"].is_number()) {
      continue;  // metadata events and others mtc does not write
    }
    const std::string ph = e["ph"].get<std::string>(), name = e["name"].get<std::string>();
    const double ts = e["ts"].get<double>();
    t.end_ts = std::max(t.end_ts, ts + (e.contains("dur") && e["dur"].is_number() ? e["dur"].get<double>() : 0));
    if (ph == "X") {
      const std::string cat = e.value("cat", "");
      t.ops += cat == "op";
      t.recomputes += cat == "recompute";
      t.copies += cat == "copy";
    } else if (ph == "i") {
      int it = 0;
      if (name.rfind("iteration ", 0) == 0 && absl::SimpleAtoi(name.substr(10), &it)) t.marks.push_back(Mark{ts, it});
    } else if (ph == "C" && e.contains("args") && e["args"].is_object()) {
      const nlohmann::json& args = e["args"];
      if (name == "compute region") {
        now.allocated = number(args, "allocated", path, "compute region");
        saw_region = true;
      } else if (name == "tensors") {
        now.persistent = number(args, "persistent", path, "tensors");
        now.swapped = number(args, "swapped", path, "tensors");
        now.dropped = number(args, "dropped", path, "tensors");
        saw_tensors = true;
      } else if (name == "budget") {
        t.budget = number(args, "m*", path, "budget");
        continue;
      } else {
        continue;
      }
      if (!t.samples.empty() && t.samples.back().ts > ts) {
        fail(absl::StrCat("--in ", path, ": counter events out of time order at ", ts, " us"));
      }
      t.samples.push_back(Sample{ts, now});
    }
  }
  if (!saw_region) {
    fail(absl::StrCat("--in ", path, ": no \"compute region\" counter: not a trace of mtc-train --chrome_trace"));
  }
  if (!saw_tensors) {
    fail(absl::StrCat("--in ", path, ": no \"tensors\" counter (the split into persistent, transient and evicted "
                      "tensors): written by an mtc-train older than this mtc-memplot"));
  }
  return t;
}

// nice_step: a 1, 2 or 5 times a power of ten at least `raw`.
double nice_step(double raw) {
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

// Bytes on the axis: in the unit of the axis's top (KiB, MiB or GiB), 1-2-5 steps of it.
struct ByteAxis {
  double unit = 1;
  const char* name = "B";
  double step = 1;  // bytes
  double top = 1;   // bytes, a multiple of step
};
ByteAxis byte_axis(double max_bytes) {
  ByteAxis a;
  for (auto [u, n] : {std::pair{1024.0 * 1024 * 1024, "GiB"}, std::pair{1024.0 * 1024, "MiB"}, std::pair{1024.0, "KiB"}}) {
    if (max_bytes >= u) {
      a.unit = u;
      a.name = n;
      break;
    }
  }
  a.step = nice_step(std::max(max_bytes, 1.0) / a.unit / 6) * a.unit;
  a.top = std::ceil(std::max(max_bytes, 1.0) * 1.04 / a.step) * a.step;
  return a;
}
std::string bytes_text(double b) {
  for (auto [u, n] : {std::pair{1024.0 * 1024 * 1024, "GiB"}, std::pair{1024.0 * 1024, "MiB"}, std::pair{1024.0, "KiB"}}) {
    if (b >= u) return absl::StrFormat("%.1f %s", b / u, n);
  }
  return absl::StrFormat("%.0f B", b);
}
std::string time_text(double us, double step_us) {
  if (step_us >= 1e6) return absl::StrFormat("%g s", us / 1e6);
  if (step_us >= 1e3) return absl::StrFormat("%g ms", us / 1e3);
  return absl::StrFormat("%g us", us);
}
std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// Column: what one pixel column of the plot shows: the layers' bytes, bottom to top.
struct Column {
  double persistent = 0, transient = 0, swapped = 0, dropped = 0;
  double resident() const { return persistent + transient; }
  double layer(int i) const { return i == 0 ? persistent : i == 1 ? transient : i == 2 ? swapped : dropped; }
};

// The layers, bottom to top (Column::layer's order): the polygons and the legend.
struct Layer {
  const char* id;
  const char* fill;
  double opacity;
  const char* label;
};
constexpr Layer kLayers[] = {{"persistent", "#4e79a7", 1.0, "persistent (parameters, optimizer state)"},
                             {"transient", "#f28e2b", 1.0, "transient (activations, gradients, workspace)"},
                             {"swapped", "#59a14f", 0.55, "evicted: swapped to host"},
                             {"dropped", "#b07aa1", 0.55, "evicted: dropped, recomputed on use"}};

struct Summary {
  double peak_resident = 0, peak_persistent = 0, peak_evicted = 0;
};

// plot: the SVG of the samples between t0 and t1 (microseconds).
std::string plot(const Trace& t, double t0, double t1, const std::string& title, int width, int height,
                 Summary& sum) {
  const double left = 86, right = 24, top = 112, bottom = 58;
  const double pw = width - left - right, ph = height - top - bottom;
  const int columns = std::max(1, static_cast<int>(pw));
  std::vector<Column> col(columns);
  // Each column holds the state it starts in (the last sample before it) and every sample
  // inside it: put() keeps the highest resident total with its split, and the highest
  // evicted bytes.
  auto put = [](Column& k, bool first, const State& s) {
    if (first || s.allocated > k.resident()) {
      k.persistent = s.resident_persistent();
      k.transient = s.allocated - k.persistent;
    }
    k.swapped = first ? s.swapped : std::max(k.swapped, s.swapped);
    k.dropped = first ? s.dropped : std::max(k.dropped, s.dropped);
  };
  State last;
  size_t j = 0;
  while (j < t.samples.size() && t.samples[j].ts <= t0) last = t.samples[j++].s;
  for (int c = 0; c < columns; ++c) {
    const double col_end = t0 + (t1 - t0) * (c + 1) / columns;
    put(col[c], true, last);
    while (j < t.samples.size() && (t.samples[j].ts < col_end || (c == columns - 1 && t.samples[j].ts <= t1))) {
      last = t.samples[j++].s;
      put(col[c], false, last);
    }
  }
  double ymax = t.budget;
  for (const Column& c : col) {
    sum.peak_resident = std::max(sum.peak_resident, c.resident());
    sum.peak_persistent = std::max(sum.peak_persistent, c.persistent);
    sum.peak_evicted = std::max(sum.peak_evicted, c.swapped + c.dropped);
    ymax = std::max(ymax, c.resident() + c.swapped + c.dropped);
  }
  const ByteAxis ya = byte_axis(ymax);
  auto X = [&](double c) { return left + c * pw / columns; };
  auto Y = [&](double b) { return top + ph - b / ya.top * ph; };

  std::string svg = absl::StrFormat(
      R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">)svg"
      "\n",
      width, height, width, height);
  absl::StrAppend(&svg, absl::StrFormat(R"svg(<rect width="%d" height="%d" fill="#ffffff"/>)svg", width, height), "\n");
  absl::StrAppend(&svg, absl::StrFormat(R"svg(<text x="%g" y="26" font-size="18" font-weight="bold" fill="#222">%s</text>)svg",
                                        left, xml_escape(title)),
                  "\n");
  std::string sub = absl::StrCat("peak resident ", bytes_text(sum.peak_resident), " (persistent ",
                                 bytes_text(sum.peak_persistent), ")");
  if (t.budget > 0) absl::StrAppend(&sub, " · budget ", bytes_text(t.budget));
  absl::StrAppend(&sub, " · evicted at most ", bytes_text(sum.peak_evicted), " · ", t.ops, " ops, ", t.recomputes,
                  " recomputes, ", t.copies, " copies");
  absl::StrAppend(&svg, absl::StrFormat(R"svg(<text x="%g" y="48" font-size="13" fill="#555">%s</text>)svg", left,
                                        xml_escape(sub)),
                  "\n");
  // Legend under the subtitle: the layers, then the budget line (when there is one), left
  // to right at about 7 px per character of 12 px text, on a second row when the first is
  // full.
  double lx = left, ly = 68;
  auto key = [&](const char* label, const auto& swatch) {  // swatch(x, y): its SVG
    const double w = 30 + 7.0 * std::string(label).size();
    if (lx > left && lx + w > width - right) {
      lx = left;
      ly += 18;
    }
    absl::StrAppend(&svg, swatch(lx, ly), "\n");
    absl::StrAppend(&svg, absl::StrFormat(R"svg(<text x="%g" y="%g" font-size="12" fill="#333">%s</text>)svg", lx + 21,
                                          ly + 5, label),
                    "\n");
    lx += w;
  };
  for (const Layer& l : kLayers) {
    key(l.label, [&](double x, double y) {
      return absl::StrFormat(R"svg(<rect x="%g" y="%g" width="16" height="12" fill="%s" fill-opacity="%g"/>)svg", x,
                             y - 6, l.fill, l.opacity);
    });
  }
  if (t.budget > 0) {
    key("budget m*", [](double x, double y) {
      return absl::StrFormat(
          R"svg(<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#d62728" stroke-width="2" stroke-dasharray="6 3"/>)svg", x,
          y, x + 16, y);
    });
  }
  // Grid and y axis.
  for (double b = 0; b <= ya.top + ya.step / 2; b += ya.step) {
    absl::StrAppend(&svg, absl::StrFormat(R"svg(<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#e4e4e4"/>)svg", left, Y(b),
                                          left + pw, Y(b)),
                    "\n");
    absl::StrAppend(&svg, absl::StrFormat(R"svg(<text x="%g" y="%.1f" font-size="12" fill="#444" text-anchor="end">%g %s</text>)svg",
                                          left - 8, Y(b) + 4, b / ya.unit, ya.name),
                    "\n");
  }
  absl::StrAppend(&svg, absl::StrFormat(R"svg(<text transform="translate(18 %g) rotate(-90)" font-size="13" fill="#333" text-anchor="middle">bytes in the compute region</text>)svg",
                                        top + ph / 2),
                  "\n");
  // Time axis.
  const double tstep = nice_step((t1 - t0) / 8);
  for (double x = std::ceil(t0 / tstep) * tstep; x <= t1; x += tstep) {
    const double px = left + (x - t0) / (t1 - t0) * pw;
    absl::StrAppend(&svg, absl::StrFormat(R"svg(<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#888"/>)svg", px, top + ph,
                                          px, top + ph + 5),
                    "\n");
    absl::StrAppend(&svg, absl::StrFormat(R"svg(<text x="%.1f" y="%g" font-size="12" fill="#444" text-anchor="middle">%s</text>)svg",
                                          px, top + ph + 20, time_text(x, tstep)),
                    "\n");
  }
  absl::StrAppend(&svg, absl::StrFormat(R"svg(<text x="%g" y="%g" font-size="13" fill="#333" text-anchor="middle">time since the run began (its ops, recomputes and copies as run)</text>)svg",
                                        left + pw / 2, height - 12.0),
                  "\n");
  // The layers, bottom to top, each a polygon between its lower edge (the layers below it,
  // stacked) and its upper edge.
  for (int i = 0; i < static_cast<int>(std::size(kLayers)); ++i) {
    auto below = [&](const Column& c) {
      double sum = 0;
      for (int k = 0; k < i; ++k) sum += c.layer(k);
      return sum;
    };
    std::string pts;
    for (int c = 0; c < columns; ++c) {
      const double y = Y(below(col[c]) + col[c].layer(i));
      absl::StrAppendFormat(&pts, "%.1f,%.1f %.1f,%.1f ", X(c), y, X(c + 1), y);
    }
    for (int c = columns - 1; c >= 0; --c) {
      const double y = Y(below(col[c]));
      absl::StrAppendFormat(&pts, "%.1f,%.1f %.1f,%.1f ", X(c + 1), y, X(c), y);
    }
    absl::StrAppend(&svg, absl::StrFormat(R"svg(<polygon id="%s" points="%s" fill="%s" fill-opacity="%g" stroke="none"/>)svg",
                                          kLayers[i].id, pts, kLayers[i].fill, kLayers[i].opacity),
                    "\n");
  }
  // Iteration marks: a dotted line each, labelled (every k-th when they are dense).
  std::vector<Mark> shown;
  for (const Mark& m : t.marks) {
    if (m.ts >= t0 && m.ts <= t1) shown.push_back(m);
  }
  const size_t every = std::max<size_t>(1, shown.size() / 20 + (shown.size() % 20 != 0 && shown.size() > 20));
  for (size_t k = 0; k < shown.size(); ++k) {
    const double px = left + (shown[k].ts - t0) / (t1 - t0) * pw;
    absl::StrAppend(&svg, absl::StrFormat(R"svg(<line class="iteration" x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#777" stroke-dasharray="2 3"/>)svg",
                                          px, top, px, top + ph),
                    "\n");
    if (k % every == 0) {
      absl::StrAppend(&svg, absl::StrFormat(R"svg(<text x="%.1f" y="%g" font-size="11" fill="#555">it %d</text>)svg", px + 3,
                                            top + 12, shown[k].iteration),
                      "\n");
    }
  }
  if (t.budget > 0) {
    absl::StrAppend(&svg, absl::StrFormat(R"svg(<line id="budget" x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#d62728" stroke-width="2" stroke-dasharray="6 3"/>)svg",
                                          left, Y(t.budget), left + pw, Y(t.budget)),
                    "\n");
    absl::StrAppend(&svg, absl::StrFormat(R"svg(<text x="%g" y="%.1f" font-size="12" fill="#d62728" text-anchor="end">budget %s</text>)svg",
                                          left + pw - 4, Y(t.budget) - 5, bytes_text(t.budget)),
                    "\n");
  }
  absl::StrAppend(&svg, absl::StrFormat(R"svg(<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>)svg", left, top,
                                        pw, ph),
                  "\n</svg>\n");
  return svg;
}

int run() {
  const std::string in = absl::GetFlag(FLAGS_in), out = absl::GetFlag(FLAGS_out);
  const int width = absl::GetFlag(FLAGS_width), height = absl::GetFlag(FLAGS_height);
  if (in.empty()) cli::fail_flags("mtc-memplot", "--in is required: the Chrome trace of a run (mtc-train --chrome_trace)");
  if (out.empty()) cli::fail_flags("mtc-memplot", "--out is required: the SVG to write");
  if (width < 600 || width > 4000) cli::fail_flags("mtc-memplot", absl::StrCat("--width ", width, ": expected 600 to 4000 pixels"));
  if (height < 300 || height > 2000) cli::fail_flags("mtc-memplot", absl::StrCat("--height ", height, ": expected 300 to 2000 pixels"));
  int first = 0, last = 0;
  if (const std::string its = absl::GetFlag(FLAGS_iterations); !its.empty()) {
    std::vector<std::string> p = absl::StrSplit(its, ':');
    if (p.size() != 2 || !absl::SimpleAtoi(p[0], &first) || !absl::SimpleAtoi(p[1], &last) || first < 1 || last < first) {
      cli::fail_flags("mtc-memplot", absl::StrCat("--iterations ", its, ": expected FIRST:LAST with 1 <= FIRST <= LAST"));
    }
  }
  if (absl::Status s = cli::check_output_file("--out", out); !s.ok()) fail(std::string(s.message()));
  const Trace t = read_trace(in);
  // By default from the first allocation (the start-up before it, measuring the copy
  // bandwidth and making the data, holds nothing) to the trace's end.
  double t0 = 0, t1 = t.end_ts;
  for (const Sample& s : t.samples) {
    if (s.s.allocated > 0) {
      t0 = s.ts;
      break;
    }
  }
  if (first > 0) {
    auto at = [&](int it) -> const Mark* {
      for (const Mark& m : t.marks) {
        if (m.iteration == it) return &m;
      }
      return nullptr;
    };
    const Mark* a = at(first);
    if (a == nullptr) {
      fail(absl::StrCat("--iterations ", first, ":", last, ": the trace has no iteration ", first, " (it has ",
                        t.marks.size(), " iteration marks)"));
    }
    if (at(last) == nullptr) {
      fail(absl::StrCat("--iterations ", first, ":", last, ": the trace has no iteration ", last, " (it has ",
                        t.marks.size(), " iteration marks)"));
    }
    t0 = a->ts;
    const Mark* b = at(last + 1);
    t1 = b != nullptr ? b->ts : t.end_ts;
  }
  if (!(t1 > t0)) fail(absl::StrCat("--in ", in, ": the trace spans no time"));
  std::string title = absl::GetFlag(FLAGS_title);
  if (title.empty()) title = absl::StrCat("memory timeline: ", in.substr(in.rfind('/') + 1));
  Summary sum;
  const std::string svg = plot(t, t0, t1, title, width, height, sum);
  const std::string tmp = absl::StrCat(out, ".tmp.", ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    f << svg;
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      fail(absl::StrCat("--out ", out, ": cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(absl::StrCat("--out ", out, ": cannot rename ", tmp, " to it"));
  }
  std::printf("mtc-memplot: wrote %s (%dx%d): %zu iteration marks shown, peak_resident_bytes=%.0f "
              "peak_persistent_bytes=%.0f peak_evicted_bytes=%.0f budget_bytes=%.0f\n",
              out.c_str(), width, height,
              static_cast<size_t>(std::count_if(t.marks.begin(), t.marks.end(),
                                                [&](const Mark& m) { return m.ts >= t0 && m.ts <= t1; })),
              sum.peak_resident, sum.peak_persistent, sum.peak_evicted, t.budget);
  return 0;
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  mtc::cli::parse_flags("mtc-memplot", "mtc_memplot",
                        "draws a run's memory timeline (persistent, transient and evicted tensors, the budget)\n"
                        "as an SVG from the Chrome trace of mtc-train --chrome_trace.\n"
                        "  mtc-memplot --in=run.trace.json --out=memory.svg [--iterations=2:3]",
                        argc, argv);
  return mtc::run();
}
