// DTP's vocabulary: how a tensor is held across the p ranks of a partition group
// (Replicated, Split(dim), Partial), how a dimension is cut into shards, the four modes
// of a matmul or conv, an op's placement signatures (OneFlow's SBP signatures), and the
// conversion from one placement to another. Pure logic: no kernels, no communicator, no
// tensor data; the runtime's dispatch (src/dist/dtp.h) acts on what this decides.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mtc/tensor.h"

namespace mtc::partition {

// Placement: Replicated (every rank holds the whole tensor), Split(dim) (rank r holds
// shard r of dimension dim, shard_range below), Partial (the tensor is the sum of the
// ranks' tensors, each of the whole shape).
enum class Kind : uint8_t { kReplicated = 0, kSplit = 1, kPartial = 2 };

struct Placement {
  Kind kind = Kind::kReplicated;
  int dim = 0;  // Split only: a non-negative dimension

  static Placement R() { return {Kind::kReplicated, 0}; }
  static Placement S(int d) { return {Kind::kSplit, d}; }
  static Placement P() { return {Kind::kPartial, 0}; }
  bool replicated() const { return kind == Kind::kReplicated; }
  bool split() const { return kind == Kind::kSplit; }
  bool partial() const { return kind == Kind::kPartial; }
  bool operator==(const Placement& o) const { return kind == o.kind && (kind != Kind::kSplit || dim == o.dim); }
  std::string str() const;  // "R", "S(1)", "P"
};

// describe: a global tensor and its placement, "f32[64,768] S(1)", for messages.
std::string describe(const TensorDesc& global, Placement p);

// Range: one shard of a dimension.
struct Range {
  int64_t offset = 0, size = 0;
};
// shard_range: shard `index` of a dimension of n elements cut into `parts`: the first
// n % parts shards hold one element more (torch.tensor_split's rule), so shards differ by
// at most one and a dimension smaller than parts leaves the last shards empty.
Range shard_range(int64_t n, int parts, int index);
// local_shape: the shape of rank `index`'s shard of a tensor of global shape `global`.
Shape local_shape(const Shape& global, Placement p, int parts, int index);
// splittable: whether dimension dim of `global` can be split over parts ranks with no
// empty shard (n >= parts).
bool splittable(const Shape& global, int dim, int parts);

// Mode: the four ways to split an op with a weight (docs/dtp.md):
//   P1 data parallel            X S(batch), W R,                     Y S(batch)
//   P2 sharded weights (ZeRO-3) X S(batch), W stored S(0), gathered, Y S(batch)
//   P3 reduction split          X S(k),     W S(k),                  Y P
//   P4 column split             X R,        W S(n),                  Y S(n)
// kNone: an op without a weight, or a signature outside the four.
enum class Mode : uint8_t { kNone = 0, kP1 = 1, kP2 = 2, kP3 = 3, kP4 = 4 };
const char* mode_name(Mode m);  // "none", "p1", ...

// Signature: one way to run an op across the group: the placement each input must have
// and the placement of each output. mode says which of the four it is, for ops that
// have them.
struct Signature {
  absl::InlinedVector<Placement, 4> in;
  absl::InlinedVector<Placement, 2> out;
  Mode mode = Mode::kNone;
  std::string str() const;  // "(S(0), R) -> S(0) [p1]"
};
using SignatureList = std::vector<Signature>;

// Conversion: what turns a tensor of placement `from` into placement `to`:
//   S(d) -> R       all_gather on d           R -> S(d)   a local slice
//   S(d) -> S(d')   all_to_all                P -> R      all_reduce (sum)
//   P -> S(d)       reduce_scatter on d       x -> x      nothing
// R -> P and S(d) -> P are not conversions a signature asks for (kUnsupported).
enum class Step : uint8_t { kNone = 0, kAllGather, kAllToAll, kAllReduce, kReduceScatter, kSlice, kUnsupported };
const char* step_name(Step s);  // "all_gather", ...
struct Conversion {
  Step step = Step::kNone;
  int from_dim = 0, to_dim = 0;  // the split dimensions involved (as Step needs them)
};
Conversion plan_conversion(Placement from, Placement to);
// conversion_bytes: bytes one rank sends for it, a tensor of global_bytes on p ranks
// (ring algorithms: all_gather and reduce_scatter (p-1)/p of the tensor, all_reduce twice
// that, all_to_all (p-1)/p of a shard; a slice nothing). +infinity when unsupported.
double conversion_bytes(Conversion c, double global_bytes, int parts);

// Choice: the signature chosen for an op, by index into its list, with the conversion
// of each input.
struct Choice {
  size_t index = 0;
  absl::InlinedVector<Conversion, 4> convert;
  double bytes = 0;  // what the conversions send, per rank
};
// Fixed: how an input may be converted: kAny, or kNever for a stored parameter, which
// moves only through its own mode (P2's gather), never by a conversion of the dispatch.
enum class Fixed : uint8_t { kAny = 0, kNever = 1 };
// choose: among `sigs` (those of mode `forced` only, when forced is not kNone and the op
// has signatures of that mode), the one whose input conversions send the fewest bytes;
// ties go to the one with fewer Replicated outputs (the op's work split, not repeated),
// then to the earlier signature. Inputs marked kNever must already have the placement a
// signature asks for. strict: a forced mode is required (an error when no signature of
// it fits); otherwise it is a preference, and the op takes another mode its inputs allow
// (the dispatch under --dtp=pN, where the parameters' placements decide). Errors name
// the op, its inputs and the modes it has.
absl::StatusOr<Choice> choose(absl::string_view op_name, std::span<const Signature> sigs,
                              std::span<const Placement> have, std::span<const TensorDesc> global,
                              std::span<const Fixed> fixed, int parts, Mode forced, bool strict = true);

// Signature builders for the common tables (used by the ops' tables next to their
// definitions):
// elementwise_signatures: inputs broadcast to out_shape (NumPy rules) and one output:
// all R; for each output dimension d of size >= parts, S(d) on every input that has the
// dimension unbroadcast and R on those that broadcast it; and, when linear_in >= 0, P on
// input linear_in with R elsewhere -> P (an op linear in that input: scale, mul by a
// replicated factor), or, when all_partial, P on every input -> P (add, sub).
void elementwise_signatures(std::span<const TensorDesc> in, const Shape& out_shape, int parts,
                            SignatureList& out, int linear_in = -1, bool all_partial = false);

}  // namespace mtc::partition
