// Checkpoints: safetensors files, and a training run's state saved to one and restored
// from it (parameters, buffers, optimizer state, and the caller's metadata: iteration,
// data position, random generators' states, flags).
//
// The safetensors format (Hugging Face's, as its Python package writes it): an 8-byte
// little-endian unsigned header length N, then N bytes of JSON, then the data buffer.
// The JSON maps each tensor's name to {"dtype": "F32", "shape": [2, 3], "data_offsets":
// [begin, end]} (byte offsets into the buffer, which the tensors cover in order, without
// gaps or overlaps), and the optional key "__metadata__" to an object of strings. Data is
// row-major and little-endian. docs/checkpoints.md says how mtc names its tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mtc/tensor.h"

namespace mtc {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}

namespace checkpoint {

// HostTensor: one tensor of a safetensors file, on the host: its dtype as the format
// spells it ("F32", "I32", "I64", ...), its shape and its bytes (row-major).
struct HostTensor {
  std::string dtype;
  Shape shape;
  std::string data;
};

// SafetensorsFile: the tensors (in name order, as the file stores them) and the metadata.
struct SafetensorsFile {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// dtype_bytes: bytes per element of a safetensors dtype (BOOL, U8, I8, F8_E4M3, F8_E5M2,
// I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64); 0 for a name the format lacks.
int dtype_bytes(const std::string& dtype);

// read_safetensors: the whole file. Every way it can be malformed is an InvalidArgument
// error naming the file and, where one is at fault, the tensor: shorter than its header,
// a header that is not a JSON object, an entry without a known dtype, a shape or two
// offsets, offsets outside the buffer, a size that does not match dtype x shape, gaps or
// overlaps, or a buffer longer than the tensors. A file that cannot be opened is
// NotFound (or the OS's reason).
absl::StatusOr<SafetensorsFile> read_safetensors(const std::string& path);

// WriteOptions: halfway, when set, runs once half the data bytes are written (a test's
// hook: it kills the process there to show that a kill leaves the old file intact).
struct WriteOptions {
  std::function<void()> halfway;
};

// write_safetensors: writes `file` to PATH.tmp.<pid>, flushes it to the disk and renames
// it over `path`: a reader sees the old file or the new one, never half of one. On an
// error the temporary file is removed and `path` is untouched.
absl::Status write_safetensors(const std::string& path, const SafetensorsFile& file, const WriteOptions& o = {});

// Training state. A checkpoint holds, by name:
//   <parameter or buffer name>            as the model names it, e.g. layer1.0.conv1.weight,
//                                         bn1.running_mean (torchvision's names for
//                                         ResNet-50, so PyTorch's state_dict files load)
//   optimizer.<parameter name>.<state>    momentum_buffer (SGD); exp_avg, exp_avg_sq and
//                                         step (AdamW; step is I64 [])
// and in its metadata "format" = "mtc-checkpoint 1", "optimizer" (sgd | adamw) and the
// caller's entries. A tensor two modules share (a tied embedding) is stored once, under
// its first name.
inline constexpr char kFormat[] = "mtc-checkpoint 1";

// collect: the state of `net` and `opt` (nullptr: none) on the host, with `metadata`.
// Synchronises (it reads every tensor).
absl::StatusOr<SafetensorsFile> collect(const nn::Module& net, optim::Optimizer* opt,
                                        std::map<std::string, std::string> metadata);

// restore: overwrites `net`'s parameters and buffers in place (the tensors keep their
// identity: the optimizer and data parallel hold them) and sets `opt`'s state from
// `file`, read from `path` (named in errors). A tensor split across the ranks (DTP) takes
// this rank's shard of the file's whole tensor; a tensor the file marks as another rank's
// own (placement "own") is skipped when the model lacks it. Everything is checked before anything is
// written: a tensor the model has and the file lacks, one the file has and the model
// lacks, a shape or dtype mismatch, state for another optimizer, or a file that is not an
// mtc checkpoint is an InvalidArgument error naming the file and the tensor, and the model
// is unchanged. PyTorch's batch-norm counters (*.num_batches_tracked) are skipped; with
// opt nullptr, optimizer state in the file is too (weights only).
absl::Status restore(const std::string& path, const SafetensorsFile& file, nn::Module& net, optim::Optimizer* opt);

// ---- Ranks with tensors of their own: DTP's split tensors, expert parallelism ----
//
// When the ranks hold different tensors, a checkpoint is a main file and a file per rank.
// The main file (rank 0 writes it) holds what every rank holds alike, and in its metadata
// "rank_files" = N and "rank_files_tag" = TAG; rank r's file, rank_file(path, TAG, r),
// holds that rank's own tensors: its shard of each tensor split across the ranks, under
// the tensor's name, with "placement.<name>" = "S(d)" and "global_shape.<name>" =
// "[a,b,...]" in its metadata, and each tensor only it holds (an expert), with
// "placement.<name>" = "own". Optimizer state goes where its parameter goes. A new save
// writes new rank files (a new TAG) before the main file that names them, so a run killed
// while saving leaves the previous main file and the rank files it names intact.

// RankedState: one rank's part of a ranked checkpoint.
struct RankedState {
  SafetensorsFile shared;  // every rank holds these alike: rank 0 writes them, with the metadata
  SafetensorsFile own;     // this rank's shards and own tensors
};
// collect_ranked: as collect, divided into the shared and the own; `own` says which of
// the model's tensors that are not split are this rank's alone (nullptr: none).
absl::StatusOr<RankedState> collect_ranked(const nn::Module& net, optim::Optimizer* opt,
                                           std::map<std::string, std::string> metadata,
                                           const std::function<bool(const Tensor&)>& own);
// rank_file: "PATH.TAG.rankR".
std::string rank_file(const std::string& path, const std::string& tag, int rank);
// read_checkpoint: the whole state saved at `path`: the file itself or, when its metadata
// names rank files, the main file with every rank's file assembled into it: own tensors
// by name, split tensors put back together in rank order (each piece checked against its
// share of the global shape). What restore() then takes is the whole model, whatever the
// number of ranks that saved it; each rank takes its shard of a split tensor, and the
// own tensors of other ranks (other experts) are skipped. A rank file that is missing,
// from another save or malformed is an InvalidArgument error naming it and the tensor.
absl::StatusOr<SafetensorsFile> read_checkpoint(const std::string& path);

}  // namespace checkpoint
}  // namespace mtc
