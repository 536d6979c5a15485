// mtc-ckpt: looks into safetensors checkpoints (include/mtc/checkpoint.h): --in FILE
// prints its metadata and a line per tensor (dtype, shape, bytes); with --compare OTHER it
// compares the two files' tensors byte for byte and prints each that differs (its largest
// difference, for F32) or that one file lacks. Exit 0: read (and, comparing, every tensor
// equal); 1: some tensor differs; 2: a flag or a file that cannot be read (the error
// names it). A checkpoint with rank files (DTP, expert parallelism) is read whole, its
// rank files assembled (checkpoint::read_checkpoint). See docs/checkpoints.md.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cli.h"
#include "mtc/checkpoint.h"

ABSL_FLAG(std::string, in, "", "the checkpoint to read (safetensors)");
ABSL_FLAG(std::string, compare, "", "a second checkpoint: compare its tensors with --in's, byte for byte");

namespace mtc {
namespace {

constexpr int kBadInput = 2;
constexpr int kDiffer = 1;
[[noreturn]] void fail(int status, const std::string& what) { cli::fail("mtc-ckpt", status, what); }

checkpoint::SafetensorsFile read(const std::string& path) {
  absl::StatusOr<checkpoint::SafetensorsFile> f = checkpoint::read_checkpoint(path);
  if (!f.ok()) fail(kBadInput, std::string(f.status().message()));
  return *std::move(f);
}

// max_f32_diff: the largest |a - b| over two F32 tensors' elements (NaN where either is).
double max_f32_diff(const checkpoint::HostTensor& a, const checkpoint::HostTensor& b) {
  double worst = 0;
  for (size_t i = 0; i + 4 <= a.data.size(); i += 4) {
    float x, y;
    std::memcpy(&x, a.data.data() + i, 4);
    std::memcpy(&y, b.data.data() + i, 4);
    const double d = std::fabs(static_cast<double>(x) - y);
    if (std::isnan(d)) return d;
    worst = std::max(worst, d);
  }
  return worst;
}

int run() {
  const std::string in = absl::GetFlag(FLAGS_in), other = absl::GetFlag(FLAGS_compare);
  if (in.empty()) fail(kBadInput, "--in is required: a safetensors checkpoint");
  const checkpoint::SafetensorsFile a = read(in);
  if (other.empty()) {
    for (const auto& [k, v] : a.metadata) std::printf("metadata %s = %s\n", k.c_str(), v.c_str());
    size_t bytes = 0;
    for (const auto& [name, t] : a.tensors) {
      std::printf("tensor %s %s %s %zu bytes\n", name.c_str(), t.dtype.c_str(), shape_str(t.shape).c_str(),
                  t.data.size());
      bytes += t.data.size();
    }
    std::printf("%zu tensors, %zu bytes\n", a.tensors.size(), bytes);
    return 0;
  }
  const checkpoint::SafetensorsFile b = read(other);
  int equal = 0, differ = 0;
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end()) {
      std::printf("only in %s: %s\n", in.c_str(), name.c_str());
      ++differ;
    } else if (t.dtype != it->second.dtype || t.shape != it->second.shape) {
      std::printf("differs: %s is %s %s and %s %s\n", name.c_str(), t.dtype.c_str(), shape_str(t.shape).c_str(),
                  it->second.dtype.c_str(), shape_str(it->second.shape).c_str());
      ++differ;
    } else if (t.data != it->second.data) {
      std::printf("differs: %s%s\n", name.c_str(),
                  t.dtype == "F32" ? absl::StrCat(", largest difference ", max_f32_diff(t, it->second)).c_str() : "");
      ++differ;
    } else {
      ++equal;
    }
  }
  for (const auto& [name, t] : b.tensors) {
    if (a.tensors.count(name) == 0) {
      std::printf("only in %s: %s\n", other.c_str(), name.c_str());
      ++differ;
    }
  }
  for (const auto& [k, v] : a.metadata) {
    auto it = b.metadata.find(k);
    if (it == b.metadata.end() || it->second != v) std::printf("metadata %s differs (not compared)\n", k.c_str());
  }
  std::printf("%d tensors equal byte for byte, %d differ or are in one file only\n", equal, differ);
  return differ == 0 ? 0 : kDiffer;
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  mtc::cli::parse_flags("mtc-ckpt", "mtc_ckpt",
                        "looks into a safetensors checkpoint, or compares two.\n"
                        "  mtc-ckpt --in=run.safetensors\n"
                        "  mtc-ckpt --in=a.safetensors --compare=b.safetensors",
                        argc, argv);
  return mtc::run();
}
