// Putting host batches on the runtime, a batch's rows, RepeatBatches, and open_data /
// open_token_data: the --data spec of mtc-train.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mtc/data.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc::data {

Batch to_device(const HostBatch& b) {
  const Shape labels = b.labels_per_sample == 1 ? Shape{static_cast<int64_t>(b.labels.size())}
                                                : Shape{b.size(), b.labels_per_sample};
  return Batch{b.tokens.empty() ? from_vector(b.shape, b.images) : from_vector_i32(b.shape, b.tokens),
               from_vector_i32(labels, b.labels)};
}

HostBatch HostBatch::rows(int64_t begin, int64_t count) const {
  MTC_CHECK(begin >= 0 && count >= 0 && begin + count <= size(), "rows [", begin, ", ", begin + count,
            ") of a batch of ", size());
  HostBatch b;
  b.shape = shape;
  b.shape[0] = count;
  b.labels_per_sample = labels_per_sample;
  // Each of the three is N equal rows (or empty).
  auto take = [&](const auto& all, auto& part) {
    if (all.empty()) return;
    const size_t row = all.size() / static_cast<size_t>(size());
    part.assign(all.begin() + begin * row, all.begin() + (begin + count) * row);
  };
  take(images, b.images);
  take(tokens, b.tokens);
  take(labels, b.labels);
  return b;
}

RepeatBatches::RepeatBatches(std::unique_ptr<DataSource> inner, int count) : inner_(std::move(inner)), count_(count) {
  MTC_CHECK(inner_ != nullptr && count_ >= 1, "RepeatBatches of ", count_, " batches");
}

HostBatch RepeatBatches::next(int batch_size) {
  const size_t i = static_cast<size_t>(calls_++ % count_);
  while (kept_.size() <= i) kept_.push_back(inner_->next(batch_size));
  MTC_CHECK(kept_[i].shape.at(0) == batch_size, "RepeatBatches: a batch of ", batch_size, " asked for where ",
            kept_[i].shape.at(0), " was kept");
  return kept_[i];
}

absl::Status RepeatBatches::seek(int64_t position) {
  if (position < 0) return absl::InvalidArgumentError(absl::StrCat("seek(", position, "): expected a position >= 0"));
  MTC_RETURN_IF_ERROR(inner_->seek(0));  // the kept batches are drawn again as next() needs them
  kept_.clear();
  calls_ = position;
  return absl::OkStatus();
}

std::string RepeatBatches::describe() const {
  return absl::StrCat(inner_->describe(), "; its first ", count_, count_ == 1 ? " batch" : " batches",
                      ", repeated");
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

absl::StatusOr<std::unique_ptr<DataSource>> open_token_data(const std::string& spec, int64_t seq, int vocab,
                                                            uint64_t seed) {
  if (spec == "synthetic") return std::make_unique<SyntheticTokens>(seq, vocab, seed);
  return absl::InvalidArgumentError(
      absl::StrCat("data '", spec, "' for a language model: expected synthetic (random token sequences)"));
}

}  // namespace mtc::data
