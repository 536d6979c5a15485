// Launchers of the kernels driven by i32 indices (nn_index.cu): the range check of labels
// and indices, embedding's row gather and its deterministic gradient. Plain C++: included
// by host code.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mtc::cuda {

// find_out_of_range: sets *position to the first position of v[0, n) holding a value
// outside [0, limit) (and *value to it), or to -1. Unlike the launchers this waits: it
// copies the answer back and synchronises `stream` (the one host wait of the kernels that
// take indices, so that a bad index is an error like on the CPU). scratch: 8 bytes of
// device memory.
cudaError_t find_out_of_range(const int32_t* v, int64_t n, int64_t limit, void* scratch, int64_t* position,
                              int32_t* value, cudaStream_t stream);

// launch_gather_rows: y (n, d) row i = w (rows, d) row idx[i] - offset, a zero row where
// that is outside [0, rows) (another vocabulary shard's row, or an index the check let
// through: never a wild read).
void launch_gather_rows(const float* w, int64_t rows, int64_t d, const int32_t* idx, int64_t n, int64_t offset,
                        float* y, cudaStream_t stream);

// embedding_grad_scratch_bytes: the scratch launch_embedding_grad needs.
size_t embedding_grad_scratch_bytes(int64_t n, int64_t vocab);
// launch_embedding_grad: dw (vocab, d), row v = the sum of the rows of dy (n, d) whose
// index is offset + v (indices outside [offset, offset + vocab) add nothing: another
// vocabulary shard's rows), added in position order starting from 0 (the CPU's order and arithmetic:
// bit-identical to it). Indices already checked; n < 2^32. Positions are sorted by
// (index, position) with a bitonic sort, each row's range found by binary search, and one
// thread per (row, column) adds its range in order: no atomics.
void launch_embedding_grad(const int32_t* idx, int64_t n, int64_t offset, const float* dy, int64_t d, int64_t vocab,
                           float* dw, void* scratch, cudaStream_t stream);

}  // namespace mtc::cuda
