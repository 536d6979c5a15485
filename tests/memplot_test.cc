// mtc-memplot (launch/mtc_memplot.cc): the memory timeline drawn from a real run's Chrome
// trace (ResNet-20 under a 10 MiB budget, so DTE evicts), its figures checked against the
// run's own summary, and every kind of bad input refused with status 2 and nothing written.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tool_run.h"

namespace mtc {
namespace {

const std::string kTrain = MTC_TRAIN_BINARY;
const std::string kPlot = MTC_MEMPLOT_BINARY;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// figure: NAME=<number> in a tool's output (-1 when absent).
double figure(const std::string& out, const std::string& name) {
  const std::regex re(name + "=([0-9.]+)");
  std::smatch m;
  return std::regex_search(out, m, re) ? std::stod(m[1]) : -1;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

class MemPlot : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path().string() + "/mtc_memplot_test_" +
                           std::to_string(::getpid()));
    std::filesystem::create_directories(*dir_);
    const ToolRun r = run_tool(kTrain + " --model=resnet20 --batch=8 --iterations=3 --warmup=0 --memory=256MiB "
                               "--threads=2 --budget=10MiB --progress=plain --chrome_trace=" + *dir_ +
                               "/run.json 2>&1");
    train_status_ = r.status;
    train_out_ = new std::string(r.output);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete train_out_;
  }
  void SetUp() override { ASSERT_EQ(train_status_, 0) << *train_out_; }
  static std::string path(const std::string& name) { return *dir_ + "/" + name; }
  // expect_bad: status 2, one line "mtc-memplot: error: ..." holding `what`, no SVG.
  static void expect_bad(const std::string& args, const std::string& what) {
    SCOPED_TRACE(args);
    std::filesystem::remove(path("bad.svg"));
    const ToolRun r = run_tool(kPlot + " " + args + " 2>&1 1>/dev/null");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_EQ(r.output.rfind("mtc-memplot: error: ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(what), std::string::npos) << r.output;
    EXPECT_EQ(count(r.output, "\n"), 1u) << r.output;
    EXPECT_FALSE(std::filesystem::exists(path("bad.svg")));
  }
  static std::string* dir_;
  static std::string* train_out_;
  static int train_status_;
};
std::string* MemPlot::dir_ = nullptr;
std::string* MemPlot::train_out_ = nullptr;
int MemPlot::train_status_ = -1;

// The whole run: the four layers, the budget line and a mark per iteration are drawn; the
// peak resident bytes are the run's own peak of the compute region (every allocation is
// in the trace, and a column keeps its highest total); evictions happened, so the evicted
// layers are not empty; the persistent tensors hold at least ResNet-20's parameters
// (272,474 floats) and stay under the peak.
TEST_F(MemPlot, DrawsTheRunsTimeline) {
  const ToolRun r = run_tool(kPlot + " --in=" + path("run.json") + " --out=" + path("all.svg") + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string svg = slurp(path("all.svg"));
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>\n"), std::string::npos);
  for (const char* id : {"persistent", "transient", "swapped", "dropped", "budget"}) {
    EXPECT_EQ(count(svg, std::string("id=\"") + id + "\""), 1u) << id;
  }
  EXPECT_EQ(count(svg, "class=\"iteration\""), 3u);
  EXPECT_FALSE(std::filesystem::exists(path("all.svg.tmp." + std::to_string(::getpid()))));
  const double peak = figure(r.output, "peak_resident_bytes");
  EXPECT_EQ(peak, figure(*train_out_, "peak_compute_bytes")) << r.output << *train_out_;
  EXPECT_EQ(figure(r.output, "budget_bytes"), 10.0 * 1024 * 1024);
  EXPECT_LE(peak, 10.0 * 1024 * 1024);
  EXPECT_GT(figure(r.output, "peak_evicted_bytes"), 0) << "a 10 MiB budget is under ResNet-20's peak at batch 8";
  const double persistent = figure(r.output, "peak_persistent_bytes");
  EXPECT_GE(persistent, 272474.0 * 4);
  EXPECT_LT(persistent, peak);
  // Every polygon point lies inside the picture.
  const std::regex pt("([0-9.]+),([0-9.]+)");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), pt); it != std::sregex_iterator(); ++it) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    ASSERT_TRUE(x >= 0 && x <= 1200 && y >= 0 && y <= 600) << it->str();
  }
}

// --iterations: a window of the run, its marks only; its peak is at most the whole run's.
TEST_F(MemPlot, DrawsAWindowOfIterations) {
  const ToolRun all = run_tool(kPlot + " --in=" + path("run.json") + " --out=" + path("w_all.svg") + " 2>&1");
  const ToolRun r = run_tool(kPlot + " --in=" + path("run.json") + " --out=" + path("w.svg") +
                             " --iterations=2:3 --width=800 --height=400 --title='ResNet-20, 10 MiB' 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string svg = slurp(path("w.svg"));
  EXPECT_EQ(count(svg, "class=\"iteration\""), 2u);
  EXPECT_NE(svg.find("width=\"800\" height=\"400\""), std::string::npos);
  EXPECT_NE(svg.find(">ResNet-20, 10 MiB</text>"), std::string::npos);
  EXPECT_GT(figure(r.output, "peak_resident_bytes"), 0);
  EXPECT_LE(figure(r.output, "peak_resident_bytes"), figure(all.output, "peak_resident_bytes"));
}

TEST_F(MemPlot, BadInputIsRefusedAndNothingIsWritten) {
  const std::string out = " --out=" + path("bad.svg");
  expect_bad(out, "--in is required");
  expect_bad("--in=" + path("run.json"), "--out is required");
  expect_bad("--in=" + path("none.json") + out, "--in " + path("none.json") + ": cannot be read");
  {
    std::ofstream(path("partial.json")) << R"({"traceEvents":[{"name":"budget","ph":"C","ts":0,)";
  }
  expect_bad("--in=" + path("partial.json") + out, ": not JSON");
  {
    std::ofstream(path("other.json")) << R"({"events":[]})";
  }
  expect_bad("--in=" + path("other.json") + out, "not a Chrome trace (expected an object with a \"traceEvents\" array)");
  {
    std::ofstream(path("old.json")) << R"({"traceEvents":[{"name":"compute region","ph":"C","ts":1,"pid":0,)"
                                    << R"("args":{"allocated":1024}}]})";
  }
  expect_bad("--in=" + path("old.json") + out, "no \"tensors\" counter");
  expect_bad("--in=" + path("run.json") + out + " --iterations=3:9", "the trace has no iteration 9");
  expect_bad("--in=" + path("run.json") + out + " --iterations=2", "expected FIRST:LAST");
  expect_bad("--in=" + path("run.json") + out + " --width=100", "--width 100: expected 600 to 4000 pixels");
  expect_bad("--in=" + path("run.json") + " --out=/nonexistent/m.svg", "--out /nonexistent/m.svg: folder /nonexistent");
}

}  // namespace
}  // namespace mtc
