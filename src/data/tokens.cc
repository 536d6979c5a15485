// SyntheticTokens: random token sequences for a language model, one independent Rng
// stream per batch index (as SyntheticData), with next-token labels.
#include "absl/strings/str_cat.h"
#include "mtc/data.h"
#include "mtc/status.h"

namespace mtc::data {

SyntheticTokens::SyntheticTokens(int64_t seq, int vocab, uint64_t seed) : seq_(seq), vocab_(vocab), seed_(seed) {
  MTC_CHECK(seq_ >= 1 && vocab_ >= 1, "SyntheticTokens(seq ", seq_, ", vocab ", vocab_, ")");
}

HostBatch SyntheticTokens::batch_at(int64_t iteration, int batch_size) const {
  MTC_CHECK(batch_size >= 1, "batch size ", batch_size);
  HostBatch b;
  b.shape = Shape{batch_size, seq_};
  b.labels_per_sample = seq_;
  const size_t n = static_cast<size_t>(batch_size * seq_);
  b.tokens.resize(n);
  b.labels.resize(n);
  Rng rng(seed_, static_cast<uint64_t>(iteration));
  std::vector<int32_t> s(static_cast<size_t>(seq_ + 1));  // one sequence and its next token
  for (int i = 0; i < batch_size; ++i) {
    for (int32_t& t : s) t = static_cast<int32_t>(rng.below(static_cast<uint32_t>(vocab_)));
    std::copy(s.begin(), s.end() - 1, b.tokens.begin() + i * seq_);
    std::copy(s.begin() + 1, s.end(), b.labels.begin() + i * seq_);
  }
  return b;
}

absl::Status SyntheticTokens::seek(int64_t position) {
  if (position < 0) return absl::InvalidArgumentError(absl::StrCat("seek(", position, "): expected a position >= 0"));
  iteration_ = position;
  return absl::OkStatus();
}

std::string SyntheticTokens::describe() const {
  return absl::StrCat("synthetic tokens: sequences of ", seq_, " ids uniform in [0, ", vocab_,
                      ") with next-token labels, seed ", seed_);
}

}  // namespace mtc::data
