// Training data for mtc: a counter-based host random generator (also used for parameter
// initialisation), seeded synthetic batches (images, or token sequences for a language
// model), and a CIFAR-10 binary reader. Batches are built on the host and then put on the
// current runtime as (images f32 NCHW or token ids i32 (N, T), labels i32).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mtc/tensor.h"

namespace mtc::data {

// Rng: a small, fast host generator (splitmix64 over a counter). Its stream depends only
// on the seed it was built with, on every platform and standard library, so runs are
// bit-reproducible. Not for cryptography.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // Rng(seed, stream): an independent stream, e.g. one per iteration or per parameter.
  Rng(uint64_t seed, uint64_t stream);
  uint64_t next_u64();
  // uniform: in [lo, hi), from 24 random bits (every float in the range is reachable
  // at float resolution).
  float uniform(float lo = 0.f, float hi = 1.f);
  // normal: N(mean, std^2) by the Box-Muller transform, in double, then rounded.
  float normal(float mean = 0.f, float std = 1.f);
  // below: uniform integer in [0, n), n >= 1 (Lemire's multiply-shift; bias < 2^-32 * n).
  uint32_t below(uint32_t n);
  // state / set_state: the whole generator as text (for a checkpoint); set_state of a
  // text state() did not make is InvalidArgument and leaves the generator unchanged.
  std::string state() const;
  absl::Status set_state(const std::string& text);

 private:
  uint64_t state_;
  bool have_spare_ = false;  // Box-Muller makes two normals at a time
  double spare_ = 0;
};

// HostBatch: one batch on the host. The inputs are images: N x sample_shape f32 values,
// row-major (NCHW for images); or tokens: N x sample_shape i32 token ids (a language
// model's (N, T) sequences), and then `images` is empty. labels: N x labels_per_sample
// values in [0, num_classes): one class per sample, or a language model's next token at
// each of the T positions (labels_per_sample = T).
struct HostBatch {
  Shape shape;  // [N, C, H, W] (or [N, ...] for any sample shape); [N, T] for tokens
  std::vector<float> images;
  std::vector<int32_t> labels;
  std::vector<int32_t> tokens;    // non-empty: the inputs are these token ids, not images
  int64_t labels_per_sample = 1;  // labels [N] when 1, else [N, labels_per_sample]
  int64_t size() const { return shape.empty() ? 0 : shape[0]; }  // N
  // rows: samples [begin, begin + count) as a batch of their own (a rank's share).
  HostBatch rows(int64_t begin, int64_t count) const;
};

// Batch: a batch on the current runtime: images f32 `shape` (or, for token inputs, i32
// token ids `shape`, e.g. (N, T)), labels i32 [N] (or [N, labels_per_sample]).
struct Batch {
  Tensor images;
  Tensor labels;
};
// to_device: puts a host batch on the current runtime (two Put commands).
Batch to_device(const HostBatch& b);

// DataSource: where training batches come from; next() returns the next batch in order.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Shape sample_shape() const = 0;  // e.g. [3, 32, 32]
  virtual int num_classes() const = 0;
  virtual HostBatch next(int batch_size) = 0;
  virtual std::string describe() const = 0;  // one line for logs
  // position: how far next() has read, in the source's own unit (batches for synthetic
  // data, records for CIFAR-10); seek(position()) later makes next() return what it would
  // have returned then (a checkpoint's data position). seek is InvalidArgument for a
  // negative position.
  virtual int64_t position() const = 0;
  virtual absl::Status seek(int64_t position) = 0;
};

enum class Distribution : uint8_t { kNormal, kUniform };  // N(0,1), or U[-1, 1)

// SyntheticData: random images and uniform labels. Batch k (the k-th call of next, or
// batch_at(k, ...)) depends only on (seed, k, batch_size): reproducible and independent
// of what was drawn before.
class SyntheticData final : public DataSource {
 public:
  SyntheticData(Shape sample_shape, int num_classes, uint64_t seed,
                Distribution dist = Distribution::kNormal);
  Shape sample_shape() const override { return sample_shape_; }
  int num_classes() const override { return num_classes_; }
  HostBatch next(int batch_size) override { return batch_at(iteration_++, batch_size); }
  HostBatch batch_at(int64_t iteration, int batch_size) const;
  std::string describe() const override;
  int64_t position() const override { return iteration_; }
  absl::Status seek(int64_t position) override;

 private:
  Shape sample_shape_;
  int num_classes_;
  uint64_t seed_;
  Distribution dist_;
  int64_t iteration_ = 0;
};

// SyntheticTokens: a language model's data: sequences of `seq` token ids drawn uniformly
// from [0, vocab), the inputs (N, T) = tokens [0, T) of each sequence and the labels
// (N, T) its next tokens, tokens [1, T + 1) (T + 1 drawn per sequence). As SyntheticData,
// batch k depends only on (seed, k, batch_size). sample_shape() is [T], num_classes()
// the vocabulary.
class SyntheticTokens final : public DataSource {
 public:
  SyntheticTokens(int64_t seq, int vocab, uint64_t seed);
  Shape sample_shape() const override { return Shape{seq_}; }
  int num_classes() const override { return vocab_; }
  HostBatch next(int batch_size) override { return batch_at(iteration_++, batch_size); }
  HostBatch batch_at(int64_t iteration, int batch_size) const;
  std::string describe() const override;
  int64_t position() const override { return iteration_; }
  absl::Status seek(int64_t position) override;

 private:
  int64_t seq_;
  int vocab_;
  uint64_t seed_;
  int64_t iteration_ = 0;
};

// CIFAR-10 binary format: each record is 1 label byte (0..9) then 3072 pixel bytes, a
// 32x32 image stored planar (1024 red, 1024 green, 1024 blue), row-major.
inline constexpr int kCifarImageBytes = 3 * 32 * 32;            // bytes
inline constexpr int kCifarRecordBytes = 1 + kCifarImageBytes;  // bytes
// The per-channel mean and standard deviation of the CIFAR-10 training set (pixels / 255).
inline constexpr float kCifarMean[3] = {0.4914f, 0.4822f, 0.4465f};
inline constexpr float kCifarStd[3] = {0.2470f, 0.2435f, 0.2616f};

// Cifar10: the records of one or more CIFAR-10 binary files, kept as bytes (50000 images
// are 150 MiB) and normalised per batch: (pixel / 255 - mean[c]) / std[c]. Batches run
// through the records in order, wrapping to the next epoch; with shuffle, each epoch is a
// fresh permutation drawn from (seed, epoch).
class Cifar10 final : public DataSource {
 public:
  // open: a directory reads data_batch_1.bin .. data_batch_5.bin from it; a file reads
  // that file. An unreadable, empty, truncated or malformed file is an error naming the
  // file, the record and what was expected.
  static absl::StatusOr<std::unique_ptr<Cifar10>> open(const std::string& path, bool shuffle = false,
                                                       uint64_t seed = 0);
  Shape sample_shape() const override { return Shape{3, 32, 32}; }
  int num_classes() const override { return 10; }
  HostBatch next(int batch_size) override;
  std::string describe() const override;
  int64_t size() const { return static_cast<int64_t>(labels_.size()); }  // records
  // position: records read, over all epochs.
  int64_t position() const override { return epoch_ * size() + cursor_; }
  absl::Status seek(int64_t position) override;
  // set_augment: from the next batch on, each image as torchvision's RandomCrop(32,
  // padding=4) and RandomHorizontalFlip() make it for CIFAR-10: padded with 4 black
  // pixels, a 32x32 window at a random offset (0-8 each way), mirrored with probability
  // 1/2. The draws come from (seed, the record's position), so a batch is the same
  // whenever it is read again (a resumed run's too).
  void set_augment(bool on) { augment_ = on; }

 private:
  Cifar10() = default;
  absl::Status read_file(const std::string& file);
  void start_epoch();

  std::string path_;
  std::vector<uint8_t> labels_;
  std::vector<uint8_t> pixels_;  // size() * kCifarImageBytes
  bool shuffle_ = false;
  bool augment_ = false;
  uint64_t seed_ = 0;
  std::vector<int64_t> order_;  // this epoch's record order
  int64_t cursor_ = 0;          // next position in order_
  int64_t epoch_ = 0;
};

// RepeatBatches: the first `count` batches of `inner`, drawn once and then returned in
// turn, forever: a model's check that it can fit a few batches (PyTorch Lightning's
// overfit_batches). Every batch must be asked for with the same size (checked).
class RepeatBatches final : public DataSource {
 public:
  RepeatBatches(std::unique_ptr<DataSource> inner, int count);
  Shape sample_shape() const override { return inner_->sample_shape(); }
  int num_classes() const override { return inner_->num_classes(); }
  HostBatch next(int batch_size) override;
  std::string describe() const override;
  int64_t position() const override { return calls_; }  // batches returned
  absl::Status seek(int64_t position) override;

 private:
  std::unique_ptr<DataSource> inner_;
  int count_;
  std::vector<HostBatch> kept_;  // the inner source's first batches, drawn as needed, at most count_
  int64_t calls_ = 0;
};

// open_data: "synthetic" (samples of `sample_shape`, `num_classes` labels) or
// "cifar10:PATH". An unknown kind or an unreadable path is an error.
absl::StatusOr<std::unique_ptr<DataSource>> open_data(const std::string& spec, const Shape& sample_shape,
                                                      int num_classes, uint64_t seed, bool shuffle = true);
// open_token_data: a language model's data for `spec`: "synthetic" (SyntheticTokens of
// `seq` tokens from `vocab`); any other kind is an error (there is no token file reader).
absl::StatusOr<std::unique_ptr<DataSource>> open_token_data(const std::string& spec, int64_t seq, int vocab,
                                                            uint64_t seed);

}  // namespace mtc::data
