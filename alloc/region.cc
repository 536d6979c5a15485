// Best-fit allocator over an address-ordered, coalesced free list. See region.h.
#include "alloc/region.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_format.h"
#include "mtc/status.h"

namespace mtc::alloc {

std::string format_bytes(size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (size_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (bytes >= (size_t{1} << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  if (bytes >= (size_t{1} << 10)) return absl::StrFormat("%.1f KiB", b / (1 << 10));
  return absl::StrFormat("%d B", bytes);
}

Region::Region(std::string name, size_t capacity)
    : name_(std::move(name)), capacity_(capacity / kAlignment * kAlignment) {
  stats_.capacity = capacity_;
  if (capacity_ > 0) insert_free(0, capacity_);
}

void Region::insert_free(size_t offset, size_t size) {
  free_by_addr_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void Region::erase_free(std::map<size_t, size_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_addr_.erase(it);
}

// take: carves [offset, offset+size) out of the free block `it`, keeping the remainders.
Block Region::take(std::map<size_t, size_t>::iterator it, size_t offset, size_t size) {
  const size_t blk_off = it->first, blk_size = it->second;
  erase_free(it);
  if (offset > blk_off) insert_free(blk_off, offset - blk_off);
  const size_t end = offset + size, blk_end = blk_off + blk_size;
  if (blk_end > end) insert_free(end, blk_end - end);
  live_.emplace(offset, size);
  stats_.allocated += size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  stats_.high_water = std::max(stats_.high_water, end);
  ++stats_.num_allocs;
  if (on_change_) on_change_(stats_.allocated);
  return Block{offset, size};
}

absl::StatusOr<Block> Region::allocate(size_t bytes) {
  const size_t size = round_up(bytes);
  auto fit = free_by_size_.lower_bound({size, 0});
  if (fit == free_by_size_.end()) {
    ++stats_.num_failures;
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: cannot allocate %s (%d bytes): %s", name_, format_bytes(size), size,
                        state()));
  }
  return take(free_by_addr_.find(fit->second), fit->second, size);
}

absl::StatusOr<Block> Region::allocate_at(size_t offset, size_t bytes) {
  const size_t size = round_up(bytes);
  if (offset % kAlignment != 0 || offset > capacity_ || size > capacity_ - offset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: range [%d, %d) is misaligned or past the region's %d bytes", name_, offset,
        offset + size, capacity_));
  }
  auto it = free_by_addr_.upper_bound(offset);
  if (it == free_by_addr_.begin() || std::prev(it)->first + std::prev(it)->second < offset + size) {
    ++stats_.num_failures;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: range [%d, %d) is not free: %s", name_, offset, offset + size, state()));
  }
  return take(std::prev(it), offset, size);
}

void Region::free(Block b) {
  auto live = live_.find(b.offset);
  MTC_CHECK(live != live_.end() && live->second == b.size, name_, ": free of a block that is not live (offset ",
            b.offset, ", size ", b.size, ")");
  live_.erase(live);
  stats_.allocated -= b.size;
  ++stats_.num_frees;
  if (on_change_) on_change_(stats_.allocated);
  size_t off = b.offset, size = b.size;
  auto next = free_by_addr_.lower_bound(off);
  if (next != free_by_addr_.end() && next->first == off + size) {
    size += next->second;
    auto after = std::next(next);
    erase_free(next);
    next = after;
  }
  if (next != free_by_addr_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  insert_free(off, size);
}

Block Region::move(Block b, size_t offset) {
  free(b);
  absl::StatusOr<Block> to = allocate_at(offset, b.size);
  MTC_CHECK(to.ok(), name_, ": move of block (offset ", b.offset, ", size ", b.size, ") to offset ", offset,
            ", which is not free");
  --stats_.num_frees;
  --stats_.num_allocs;
  return *to;
}

std::vector<Block> Region::live_blocks() const {
  std::vector<Block> out;
  out.reserve(live_.size());
  for (const auto& [offset, size] : live_) out.push_back(Block{offset, size});
  std::sort(out.begin(), out.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
  return out;
}

FreeNeighbors Region::free_neighbors(Block b) const {
  FreeNeighbors n;
  auto next = free_by_addr_.lower_bound(b.offset + b.size);
  if (next != free_by_addr_.end() && next->first == b.offset + b.size) n.right = next->second;
  auto after = free_by_addr_.lower_bound(b.offset);
  if (after != free_by_addr_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == b.offset) n.left = prev->second;
  }
  return n;
}

size_t Region::largest_free() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

absl::StatusOr<Block> Region::allocate_lowest(size_t bytes) {
  const std::optional<Block> b = lowest_free(round_up(bytes));
  if (!b) return allocate(bytes);  // its error names the request and the region's state
  return allocate_at(b->offset, bytes);
}

std::optional<Block> Region::lowest_free(size_t bytes) const {
  for (const auto& [offset, size] : free_by_addr_) {
    if (size >= bytes) return Block{offset, size};
  }
  return std::nullopt;
}

RegionStats Region::stats() const {
  RegionStats s = stats_;
  s.free_bytes = capacity_ - stats_.allocated;
  s.largest_free = largest_free();
  s.live_blocks = live_.size();
  s.free_blocks = free_by_addr_.size();
  return s;
}

void Region::reset_peak() {
  stats_.peak_allocated = stats_.allocated;
  size_t hw = 0;
  for (const auto& [off, size] : live_) hw = std::max(hw, off + size);
  stats_.high_water = hw;
}

std::string Region::state() const {
  return absl::StrFormat("%s has %s of %s allocated, largest free block %s, %d free blocks", name_,
                         format_bytes(stats_.allocated), format_bytes(capacity_),
                         format_bytes(largest_free()), free_by_addr_.size());
}

void Region::check_invariants() const {
  MTC_CHECK(free_by_addr_.size() == free_by_size_.size(), name_, ": free indexes disagree");
  std::map<size_t, std::pair<size_t, bool>> all;  // offset -> (size, is_free)
  size_t free_total = 0, live_total = 0;
  for (const auto& [off, size] : free_by_addr_) {
    MTC_CHECK(free_by_size_.count({size, off}) == 1, name_, ": free block missing from size index");
    all.emplace(off, std::make_pair(size, true));
    free_total += size;
  }
  for (const auto& [off, size] : live_) {
    MTC_CHECK(all.emplace(off, std::make_pair(size, false)).second, name_, ": two blocks at ", off);
    live_total += size;
  }
  size_t expect = 0;
  bool prev_free = false;
  for (const auto& [off, v] : all) {
    MTC_CHECK(off == expect, name_, ": gap or overlap at offset ", off, ", expected ", expect);
    MTC_CHECK(!(prev_free && v.second), name_, ": adjacent free blocks at ", off, " not merged");
    MTC_CHECK(v.first > 0 && v.first % kAlignment == 0, name_, ": bad block size ", v.first);
    expect = off + v.first;
    prev_free = v.second;
  }
  MTC_CHECK(expect == capacity_, name_, ": blocks end at ", expect, ", capacity ", capacity_);
  MTC_CHECK(live_total == stats_.allocated, name_, ": allocated counter ", stats_.allocated,
            " but live blocks hold ", live_total);
  MTC_CHECK(free_total + live_total == capacity_, name_, ": bytes do not balance");
}

}  // namespace mtc::alloc
