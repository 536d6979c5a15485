// Putting host batches on the runtime, and open_data: the --data spec of mtc-train.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mtc/data.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc::data {

Batch to_device(const HostBatch& b) {
  return Batch{from_vector(b.shape, b.images),
               from_vector_i32(Shape{static_cast<int64_t>(b.labels.size())}, b.labels)};
}

absl::StatusOr<std::unique_ptr<DataSource>> open_data(const std::string& spec, const Shape& sample_shape,
                                                      int num_classes, uint64_t seed, bool shuffle) {
  if (spec == "synthetic") return std::make_unique<SyntheticData>(sample_shape, num_classes, seed);
  if (absl::StartsWith(spec, "cifar10:")) {
    const std::string path = spec.substr(8);
    if (path.empty())
      return absl::InvalidArgumentError("data 'cifar10:' names no path: expected cifar10:PATH");
    MTC_ASSIGN_OR_RETURN(std::unique_ptr<Cifar10> c, Cifar10::open(path, shuffle, seed));
    return std::unique_ptr<DataSource>(std::move(c));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown data '", spec, "': expected synthetic or cifar10:PATH"));
}

}  // namespace mtc::data
