// SyntheticData: random images (N(0,1) or U[-1,1)) and uniform labels, one independent
// Rng stream per batch index, so batch k is the same whatever was drawn before it.
#include "absl/strings/str_cat.h"
#include "mtc/data.h"
#include "mtc/status.h"

namespace mtc::data {

SyntheticData::SyntheticData(Shape sample_shape, int num_classes, uint64_t seed, Distribution dist)
    : sample_shape_(std::move(sample_shape)), num_classes_(num_classes), seed_(seed), dist_(dist) {
  MTC_CHECK(num_classes_ >= 1, "SyntheticData with ", num_classes_, " classes");
}

HostBatch SyntheticData::batch_at(int64_t iteration, int batch_size) const {
  MTC_CHECK(batch_size >= 1, "batch size ", batch_size);
  HostBatch b;
  b.shape = Shape{batch_size};
  b.shape.insert(b.shape.end(), sample_shape_.begin(), sample_shape_.end());
  Rng rng(seed_, static_cast<uint64_t>(iteration));
  b.labels.resize(batch_size);
  for (int32_t& l : b.labels) l = static_cast<int32_t>(rng.below(static_cast<uint32_t>(num_classes_)));
  b.images.resize(static_cast<size_t>(numel(b.shape)));
  if (dist_ == Distribution::kNormal) {
    for (float& x : b.images) x = rng.normal();
  } else {
    for (float& x : b.images) x = rng.uniform(-1.f, 1.f);
  }
  return b;
}

absl::Status SyntheticData::seek(int64_t position) {
  if (position < 0) return absl::InvalidArgumentError(absl::StrCat("seek(", position, "): expected a position >= 0"));
  iteration_ = position;
  return absl::OkStatus();
}

std::string SyntheticData::describe() const {
  return absl::StrCat("synthetic ", dist_ == Distribution::kNormal ? "N(0,1)" : "U[-1,1)", " samples ",
                      shape_str(sample_shape_), ", ", num_classes_, " classes, seed ", seed_);
}

}  // namespace mtc::data
