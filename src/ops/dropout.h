// dropout: zeroes each element with probability p and scales the rest by 1/(1-p). The
// mask is a pure function of (seed, element index) - a counter-based generator - and the
// seed is fixed when the op is created, so a recompute of the op (DTE) reproduces the same
// bits and the backward, the same op applied to dy, reuses the same mask.
#pragma once

#include <cstdint>

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// dropout_draw: 32 random bits for element i under `seed`: splitmix64 at position i of
// the stream `seed`, a counter-based generator. Inline so that every device and the
// tests draw the same mask.
inline uint32_t dropout_draw(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
}
// dropout_threshold: an element is kept when its draw, read as u = draw / 2^32 in [0, 1),
// is at least p; that is, draw >= this.
inline uint64_t dropout_threshold(float p) { return static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0); }

// DropoutOp: x f32 -> x * mask / (1 - p). Its backward is the same op (same p, same
// seed) applied to dy. p must lie in [0, 1).
//
// DTP: R -> R (every rank draws the same mask from the same seed); P -> P (the mask is
// the same on every rank, and x * mask is linear in x). No split: a shard's elements
// would draw the mask of the shard's local indices, not of their global ones.
struct DropoutOp final : OpDef {
  double flops_per_element() const override { return 3; }  // hash, compare, scale
  MTC_OP_SCHEMA("dropout")
  DropoutOp(float p, uint64_t seed) : p(p), seed(seed) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  float p;
  uint64_t seed;
};

}  // namespace mtc
