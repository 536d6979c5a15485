// Launchers of the CUDA kernels (.cu files): plain functions on raw pointers, callable
// from host code without CUDA's compiler. Each enqueues on `stream` and returns at once;
// the caller checks the launch with cuda::last_launch. Grouped by the .cu file defining
// them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

// blocks: a grid of `threads`-thread blocks covering n elements (at most 65535 * 32 blocks;
// the kernels loop with a grid stride).
inline unsigned blocks(int64_t n, int threads = 256) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b > 2097120 ? 2097120 : b);
}

// Column sums in double over fixed row chunks (linear's bias gradient, layer norm's gamma
// and beta gradients): blocks of kColTile columns (one warp wide: coalesced rows) by
// kRowLanes rows read at once, each summing one chunk of rows; the chunks' partial sums
// are then added in order. ColumnChunks: enough chunks for about kTargetBlocks blocks,
// at least kRowLanes rows each, a function of the shape only, so the order is fixed.
inline constexpr int kColTile = 32;
inline constexpr int kRowLanes = 8;
inline constexpr int64_t kTargetBlocks = 1024;
struct ColumnChunks {
  int64_t count, rows_each;
};
inline ColumnChunks column_chunks(int64_t rows, int64_t cols) {
  const int64_t col_blocks = (cols + kColTile - 1) / kColTile;
  int64_t count = kTargetBlocks / (col_blocks < 1 ? 1 : col_blocks);
  const int64_t most = (rows + kRowLanes - 1) / kRowLanes;
  if (count > most) count = most;
  if (count < 1) count = 1;
  const int64_t each = (rows + count - 1) / count;
  return {count, each < 1 ? 1 : each};
}

}  // namespace mtc::cuda
