// Tma: tracing the compute region's transient requests, planning their offsets once a
// signature recurs, and proposing the planned offsets. See tma.h.
#include "alloc/tma.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace mtc::alloc {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64's finaliser over h ^ v: order-sensitive and cheap.
  uint64_t x = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

constexpr size_t kMaxTraced = 256;

Tma::Tma(TmaOptions options) : opts_(options) {}

// Note [Packing at the boundary]
// The iterations traced before the first plan allocate best-fit, so the tensors that
// outlive them (optimizer state made at the first step, buffers, the next batch) land in
// whatever holes the transients left, and the low end of the region is a sieve: on a
// 125-layer GPT (hidden 64, seq 64, batch 8) 47.8 MiB were live in the lowest 69.6 MiB, in
// 1,836 free pieces, so the plan (328 MB, at its lower bound) started at 69.6 MiB and the
// high water stayed 1.061x the peak of live bytes in every planned iteration. Where the
// plan's room starts more than 1% of its peak above the bytes allocated, the executor
// slides the live tensors below it down together first (evict::Engine::pack_low), once:
// later iterations put what outlives them first-fit low, as the plan leaves it.
void Tma::boundary(const Region& region, const std::function<void()>& pack) {
  if (in_iteration_) end_iteration();
  in_iteration_ = true;
  clock_ = 0;
  requests_.clear();
  live_.clear();
  seen_.clear();
  prefix_ = 0;
  program_requests_ = 0;
  diverged_ = false;
  if (pack) {
    if (const Plan* p = next_plan(); p != nullptr && p->peak > 0) {
      const std::optional<Block> room = region.lowest_free(p->peak);
      if (!room || room->offset > region.stats().allocated + p->peak / 100) pack();
    }
  }
  choose_base(region);
}

const Tma::Plan* Tma::next_plan() const {
  if (plans_.empty()) return nullptr;
  if (auto it = cache_.find(last_signature_); it != cache_.end() && it->second.plan) return it->second.plan.get();
  return plans_.back().get();
}

void Tma::choose_base(const Region& region) {
  active_ = nullptr;
  iteration_planned_ = false;
  // The plan of the last iteration's signature when it has one, else the newest.
  const Plan* p = next_plan();
  if (p == nullptr) return;
  // The lowest free stretch that holds the whole plan: above the persistent blocks at the
  // region's low end when they are packed there, around them when they are not.
  std::optional<Block> room = region.lowest_free(p->peak);
  if (!room) {
    // No free block holds the whole plan (under a tight region, a crossing tensor or a
    // hole among the persistent blocks takes a little of it): the plan goes to the
    // largest free block, and the requests planned past its end fall back to best-fit.
    ++stats_.plan_failures;
    const size_t largest = region.largest_free();
    if (largest == 0) return;
    room = region.lowest_free(largest);
  }
  base_ = room->offset;
  base_limit_ = std::max(room->offset + room->size, base_ + p->peak);
  active_ = p;
  iteration_planned_ = true;
  ++stats_.planned_iterations;
}

std::optional<size_t> Tma::propose(uint64_t op_key, size_t size) {
  if (!in_iteration_ || active_ == nullptr) return std::nullopt;
  const uint64_t key = mix(op_key, size);
  const size_t k = program_requests_;
  const uint64_t prefix = mix(prefix_, key);
  if (!is_regeneration(op_key) && !diverged_ && (k >= active_->prefix.size() || active_->prefix[k] != prefix)) {
    // The iteration left the active plan's sequence here. Another cached plan with this
    // same prefix (a dynamic model's other shape) takes over; if none has it, the active
    // plan stays and is matched by (key, occurrence) from here on.
    for (auto it = plans_.rbegin(); it != plans_.rend(); ++it) {
      const Plan& q = **it;
      if (k < q.prefix.size() && q.prefix[k] == prefix && base_ + q.peak <= base_limit_) {
        active_ = &q;
        break;
      }
    }
    // A prefix no plan has now, none will have later in this iteration.
    diverged_ = active_->prefix.size() <= k || active_->prefix[k] != prefix;
  }
  // The n-th request of this key in the iteration takes the plan's n-th of that key, so
  // a request inserted or left out (a recompute, an eviction's swap-in) shifts no other.
  auto it = active_->by_key.find(key);
  if (it == active_->by_key.end()) return std::nullopt;
  auto seen = seen_.find(key);
  const size_t n = seen == seen_.end() ? 0 : seen->second;
  if (n >= it->second.size() || it->second[n] < 0) return std::nullopt;
  return base_ + static_cast<size_t>(it->second[n]);
}

void Tma::placed(uint64_t op_key, Block b, bool hit) {
  if (!in_iteration_) return;
  const uint64_t key = mix(op_key, b.size);
  const bool program = !is_regeneration(op_key);
  if (program) {
    prefix_ = mix(prefix_, key);
    ++program_requests_;
  }
  ++seen_[key];
  live_[b.offset] = requests_.size();
  requests_.push_back(Request{key, b.size, clock_++, -1, program});
  if (iteration_planned_) ++(hit ? stats_.hits : stats_.misses);
}

void Tma::freed(Block b) {
  if (!in_iteration_) return;
  auto it = live_.find(b.offset);
  if (it == live_.end()) return;  // allocated before this iteration began
  requests_[it->second].end = clock_++;
  live_.erase(it);
}

void Tma::moved(Block from, Block to) {
  if (!in_iteration_) return;
  auto it = live_.find(from.offset);
  if (it == live_.end()) return;
  const size_t index = it->second;
  live_.erase(it);
  live_[to.offset] = index;
}

void Tma::end_iteration() {
  ++stats_.iterations;
  uint64_t signature = 0;
  for (const Request& r : requests_) {
    if (r.program) signature = mix(signature, r.key);
  }
  last_signature_ = signature;
  const bool past_warmup = stats_.iterations > static_cast<uint64_t>(opts_.warmup_iterations);
  Entry& e = cache_[signature];
  ++e.seen;
  e.last_seen = stats_.iterations;
  if (past_warmup) {
    ++stats_.cache_lookups;
    if (e.plan) ++stats_.cache_hits;
  }
  if (e.plan) return;
  if (stats_.iterations >= static_cast<uint64_t>(opts_.warmup_iterations) && e.seen >= 2) {
    make_plan(signature, requests_);  // this iteration's trace: the signature's latest
    return;
  }
  // A model whose shapes rarely recur must not hoard entries: past kMaxTraced signatures
  // waiting for a second sighting, those seen once are forgotten.
  if (cache_.size() > kMaxTraced) {
    absl::erase_if(cache_, [&](const auto& kv) {
      return kv.first != signature && !kv.second.plan && kv.second.seen < 2;
    });
  }
}

void Tma::make_plan(uint64_t signature, const std::vector<Request>& trace) {
  // Transient requests only: those freed within the iteration.
  std::vector<PlanBuffer> buffers;
  std::vector<size_t> index;  // buffers[i] is trace[index[i]]
  for (size_t k = 0; k < trace.size(); ++k) {
    if (trace[k].end < 0) continue;
    buffers.push_back(PlanBuffer{static_cast<int64_t>(k), trace[k].start, trace[k].end, trace[k].size});
    index.push_back(k);
  }
  auto plan = std::make_shared<Plan>();
  uint64_t prefix = 0;
  for (const Request& r : trace) {
    if (!r.program) continue;
    prefix = mix(prefix, r.key);
    plan->prefix.push_back(prefix);
  }
  std::vector<int64_t> offsets(trace.size(), -1);
  if (!buffers.empty()) {
    PlanOptions po;
    po.time_limit_sec = opts_.plan_time_limit_sec;
    po.alignment = kAlignment;
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<PlanResult> r = alloc::plan(buffers, po);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats_.plan_sec += sec;
    stats_.max_plan_sec = std::max(stats_.max_plan_sec, sec);
    if (!r.ok()) return;  // traced sizes are positive and lifetimes ordered: not expected
    if (!opts_.problem_path.empty()) {
      const std::string path = stats_.plans == 0 ? opts_.problem_path
                                                 : absl::StrCat(opts_.problem_path, ".", stats_.plans + 1);
      if (const absl::Status w = write_minimalloc_csv(path, buffers, r->offsets); !w.ok()) {
        // Checked writable before the run; a disk that fills later costs the file, not the run.
        ++stats_.problem_write_failures;
        std::fprintf(stderr, "mtc: TMA: the plan's problem was not written: %s\n", std::string(w.message()).c_str());
      }
    }
    for (size_t i = 0; i < buffers.size(); ++i) offsets[index[i]] = static_cast<int64_t>(r->offsets[i]);
    plan->peak = r->peak;
    stats_.last_plan_peak = r->peak;
    stats_.last_plan_lower_bound = r->lower_bound;
  }
  for (size_t k = 0; k < trace.size(); ++k) plan->by_key[trace[k].key].push_back(offsets[k]);
  ++stats_.plans;
  stats_.cache_bytes += plan_bytes(*plan);
  cache_[signature].plan = plan;
  plans_.push_back(std::move(plan));
  evict_plans(signature);
  stats_.plans_cached = plans_.size();
}

// plan_bytes: the host bytes a plan holds: its prefix hashes, and per key its offsets
// and the table's slot (key, vector).
size_t Tma::plan_bytes(const Plan& p) {
  size_t b = sizeof(Plan) + p.prefix.capacity() * sizeof(uint64_t);
  for (const auto& [key, offsets] : p.by_key) b += sizeof(key) + sizeof(offsets) + offsets.capacity() * sizeof(int64_t);
  return b;
}

// evict_plans: past max_plans, the plan whose signature was seen longest ago goes (never
// `keep`'s, just made). Its entry keeps its sightings, so it is planned again the next
// time it ends an iteration. Eviction runs at an iteration's end, before the next one
// chooses its plan, so no active plan goes.
void Tma::evict_plans(uint64_t keep) {
  while (plans_.size() > std::max<size_t>(opts_.max_plans, 1)) {
    auto victim = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (!it->second.plan || it->first == keep) continue;
      if (victim == cache_.end() || it->second.last_seen < victim->second.last_seen) victim = it;
    }
    if (victim == cache_.end()) return;
    const Plan* p = victim->second.plan.get();
    stats_.cache_bytes -= plan_bytes(*p);
    plans_.erase(std::remove_if(plans_.begin(), plans_.end(), [&](const auto& q) { return q.get() == p; }),
                 plans_.end());
    victim->second.plan.reset();
    ++stats_.plans_evicted;
  }
}

}  // namespace mtc::alloc
