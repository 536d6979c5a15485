// The CIFAR-10 binary reader: validates every record on load (so a bad file fails at
// start-up, naming the file and the record), then serves normalised batches in order or
// in a per-epoch shuffled order, optionally augmented (random crop and flip).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "mtc/data.h"
#include "mtc/status.h"

namespace mtc::data {

namespace {
constexpr uint64_t kAugmentStream = 0x6175676d656e74;  // "augment": the crops' draws, apart from the shuffles'
}  // namespace

absl::StatusOr<std::unique_ptr<Cifar10>> Cifar10::open(const std::string& path, bool shuffle, uint64_t seed) {
  std::unique_ptr<Cifar10> c(new Cifar10());
  c->path_ = path;
  c->shuffle_ = shuffle;
  c->seed_ = seed;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (int i = 1; i <= 5; ++i) {
      MTC_RETURN_IF_ERROR(
          c->read_file((std::filesystem::path(path) / absl::StrCat("data_batch_", i, ".bin")).string()));
    }
  } else {
    MTC_RETURN_IF_ERROR(c->read_file(path));
  }
  c->start_epoch();
  return c;
}

absl::Status Cifar10::read_file(const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cifar10: cannot open ", file, ": ", std::strerror(errno)));
  }
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  const bool read_error = std::ferror(f) != 0;
  std::fclose(f);
  if (read_error) return absl::DataLossError(absl::StrCat("cifar10: error reading ", file));
  const auto expected = [] {
    return absl::StrCat("expected records of ", kCifarRecordBytes, " bytes (1 label byte + ",
                        kCifarImageBytes, " pixel bytes)");
  };
  if (bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cifar10: ", file, " is empty: ", expected()));
  }
  const size_t records = bytes.size() / kCifarRecordBytes;
  if (const size_t tail = bytes.size() % kCifarRecordBytes; tail != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cifar10: ", file, ": record ", records, " (at byte ", records * kCifarRecordBytes,
        ") is truncated: ", tail, " bytes where ", kCifarRecordBytes, " were expected (1 label byte + ",
        kCifarImageBytes, " pixel bytes); the file has ", bytes.size(), " bytes"));
  }
  for (size_t r = 0; r < records; ++r) {
    const uint8_t label = bytes[r * kCifarRecordBytes];
    if (label > 9) {
      return absl::InvalidArgumentError(
          absl::StrCat("cifar10: ", file, ": record ", r, " (at byte ", r * kCifarRecordBytes, ") has label ",
                       static_cast<int>(label), ", expected 0..9 (is this a CIFAR-10 binary file?)"));
    }
    labels_.push_back(label);
    const uint8_t* px = bytes.data() + r * kCifarRecordBytes + 1;
    pixels_.insert(pixels_.end(), px, px + kCifarImageBytes);
  }
  return absl::OkStatus();
}

void Cifar10::start_epoch() {
  order_.resize(labels_.size());
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (shuffle_) {  // Fisher-Yates with the epoch's own stream
    Rng rng(seed_, static_cast<uint64_t>(epoch_));
    for (size_t i = order_.size(); i > 1; --i)
      std::swap(order_[i - 1], order_[rng.below(static_cast<uint32_t>(i))]);
  }
  cursor_ = 0;
}

absl::Status Cifar10::seek(int64_t position) {
  if (position < 0) return absl::InvalidArgumentError(absl::StrCat("seek(", position, "): expected a position >= 0"));
  epoch_ = position / size();
  start_epoch();
  cursor_ = position % size();
  return absl::OkStatus();
}

HostBatch Cifar10::next(int batch_size) {
  MTC_CHECK(batch_size >= 1, "batch size ", batch_size);
  HostBatch b;
  b.shape = Shape{batch_size, 3, 32, 32};
  b.images.resize(static_cast<size_t>(batch_size) * kCifarImageBytes);
  b.labels.resize(batch_size);
  constexpr int kPlane = 32 * 32;  // pixels per channel
  for (int i = 0; i < batch_size; ++i) {
    if (cursor_ == static_cast<int64_t>(order_.size())) {
      ++epoch_;
      start_epoch();
    }
    const int64_t at = position();  // this record's place in the whole stream
    const int64_t r = order_[cursor_++];
    b.labels[i] = labels_[r];
    const uint8_t* px = pixels_.data() + r * kCifarImageBytes;
    float* dst = b.images.data() + static_cast<size_t>(i) * kCifarImageBytes;
    if (!augment_) {
      for (int c = 0; c < 3; ++c) {
        const float inv_std = 1.f / kCifarStd[c];
        for (int p = 0; p < kPlane; ++p) {
          dst[c * kPlane + p] = (px[c * kPlane + p] / 255.f - kCifarMean[c]) * inv_std;
        }
      }
      continue;
    }
    // Crop then flip: output (y, x) is the source pixel (y + dy, x' + dx) with x' = 31 - x
    // when mirrored, else x; outside the image, the padding's black (0).
    Rng rng(seed_ + kAugmentStream, static_cast<uint64_t>(at));
    const int dy = static_cast<int>(rng.below(9)) - 4, dx = static_cast<int>(rng.below(9)) - 4;
    const bool flip = rng.below(2) == 1;
    for (int c = 0; c < 3; ++c) {
      const float inv_std = 1.f / kCifarStd[c];
      for (int y = 0; y < 32; ++y) {
        for (int x = 0; x < 32; ++x) {
          const int sy = y + dy, sx = (flip ? 31 - x : x) + dx;
          const int v = sy >= 0 && sy < 32 && sx >= 0 && sx < 32 ? px[c * kPlane + sy * 32 + sx] : 0;
          dst[c * kPlane + y * 32 + x] = (v / 255.f - kCifarMean[c]) * inv_std;
        }
      }
    }
  }
  return b;
}

std::string Cifar10::describe() const {
  return absl::StrCat("cifar10 ", path_, ": ", size(), " images",
                      shuffle_ ? ", shuffled per epoch" : ", in order");
}

}  // namespace mtc::data
