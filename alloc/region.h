// Region: a best-fit allocator over one contiguous byte range of a device arena.
//
// Policy:
//  - every request is rounded up to kAlignment bytes; a zero-byte request takes one unit;
//  - the free list is address-ordered and always coalesced (neighbours merge on free);
//  - allocation takes the smallest free block that fits (ties: lowest address) and
//    carves the request from its low end;
//  - free_neighbors(b) answers how many free bytes touch b on the left and on the right
//    in O(log n); DTE prefers evictions that merge into large free blocks.
// A request that cannot be met returns ResourceExhausted naming the request and the
// region's state. Freeing a block that is not live is an internal error (abort).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace mtc::alloc {

inline constexpr size_t kAlignment = 256;  // bytes; what cudaMalloc guarantees too

// round_up: the bytes a request takes. Saturates rather than wrapping, so a request near
// SIZE_MAX stays larger than any region.
inline size_t round_up(size_t bytes) {
  constexpr size_t kMaxRounded = SIZE_MAX / kAlignment * kAlignment;
  if (bytes > kMaxRounded) return kMaxRounded;
  return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

// Block: a live allocation, [offset, offset + size) relative to the region's start.
struct Block {
  size_t offset = 0;
  size_t size = 0;  // bytes, already rounded
  bool operator==(const Block&) const = default;
};

// RegionStats: PyTorch memory_stats vocabulary. All figures in bytes.
struct RegionStats {
  size_t capacity = 0;        // the region's size ("reserved": taken once, never grows)
  size_t allocated = 0;       // bytes in live blocks
  size_t peak_allocated = 0;  // max of allocated since the last reset_peak()
  size_t high_water = 0;      // max end offset of any live block since the last reset_peak()
  size_t free_bytes = 0;      // capacity - allocated
  size_t largest_free = 0;    // the largest free block
  size_t live_blocks = 0;
  size_t free_blocks = 0;
  uint64_t num_allocs = 0;    // calls that succeeded
  uint64_t num_frees = 0;
  uint64_t num_failures = 0;  // calls that found no block
  // fragmentation: free bytes that are not in the largest free block, as a fraction of
  // all free bytes (0 when nothing or one block is free).
  double fragmentation() const {
    return free_bytes == 0 ? 0.0
                           : static_cast<double>(free_bytes - largest_free) / free_bytes;
  }
};

// FreeNeighbors: free bytes directly adjacent to a live block.
struct FreeNeighbors {
  size_t left = 0;
  size_t right = 0;
};

class Region {
 public:
  Region(std::string name, size_t capacity);

  // allocate: best fit for `bytes` (rounded up to kAlignment).
  absl::StatusOr<Block> allocate(size_t bytes);
  // allocate_lowest: first fit: the lowest free block that holds `bytes` (for persistent
  // tensors, which belong packed at the region's low end).
  absl::StatusOr<Block> allocate_lowest(size_t bytes);
  // allocate_at: exactly [offset, offset + round_up(bytes)), if that range is free.
  absl::StatusOr<Block> allocate_at(size_t offset, size_t bytes);
  // free: returns a live block; merges it with free neighbours.
  void free(Block b);
  // move: live block b now takes [offset, offset + b.size), which must lie in b and the
  // free bytes around it (compaction: Engine::compact). The region moves no bytes, and
  // the move counts as neither an allocation nor a free.
  Block move(Block b, size_t offset);
  // live_blocks: every live block, by offset. O(n log n); for compaction and tests.
  std::vector<Block> live_blocks() const;

  FreeNeighbors free_neighbors(Block b) const;
  // fits: whether a request of `bytes` could be met now.
  bool fits(size_t bytes) const { return largest_free() >= round_up(bytes); }
  size_t largest_free() const;
  // lowest_free: the lowest free block of at least `bytes`; O(free blocks).
  std::optional<Block> lowest_free(size_t bytes) const;
  RegionStats stats() const;
  void reset_peak();
  const std::string& name() const { return name_; }
  size_t capacity() const { return capacity_; }
  // state: one line for error messages, e.g. "compute region: 12 MiB of 64 MiB allocated,
  // largest free block 3 MiB, 7 free blocks".
  std::string state() const;
  // set_on_change: f is called with the bytes allocated after every allocation and free
  // (a Chrome trace's counter track); an empty f removes it.
  void set_on_change(std::function<void(size_t allocated)> f) { on_change_ = std::move(f); }
  // check_invariants: aborts unless free and live blocks tile the region exactly, the
  // free list is coalesced and the two free indexes agree. O(n); for tests.
  void check_invariants() const;

 private:
  void insert_free(size_t offset, size_t size);
  void erase_free(std::map<size_t, size_t>::iterator it);
  Block take(std::map<size_t, size_t>::iterator it, size_t offset, size_t size);

  std::string name_;
  size_t capacity_;
  std::map<size_t, size_t> free_by_addr_;            // offset -> size
  std::set<std::pair<size_t, size_t>> free_by_size_;  // (size, offset)
  absl::flat_hash_map<size_t, size_t> live_;         // offset -> size
  RegionStats stats_;
  std::function<void(size_t)> on_change_;
};

// format_bytes: "1.50 GiB", "12.0 MiB", "256 B".
std::string format_bytes(size_t bytes);

}  // namespace mtc::alloc
