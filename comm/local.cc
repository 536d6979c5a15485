// The local backend: a world of one. Every collective is a copy (or nothing), but it runs
// on a comm thread like the MPI backend's, so a Work behaves the same under both and code
// tested on one rank meets the same asynchrony as on many. split() gives another world
// of one.
#include <cstring>

#include "comm/internal.h"

namespace mtc::comm::internal {
namespace {

// run_local: the collective for one rank. Each reduction of one contribution is the
// contribution itself (kAvg divides by a world size of 1).
absl::Status run_local(const Call& c) {
  const size_t es = data_type_size(c.type);
  size_t n = 0;
  switch (c.kind) {
    case Kind::kAllReduce:
    case Kind::kAllGather:
    case Kind::kReduceScatter:
    case Kind::kAllToAll:
      n = c.count;
      break;
    case Kind::kAllToAllV:
      n = c.send_counts[0];  // validate() saw recv_counts[0] == send_counts[0]
      break;
    case Kind::kBroadcast:
    case Kind::kBarrier:
      return absl::OkStatus();
  }
  if (n > 0 && c.send != c.recv) std::memcpy(c.recv, c.send, n * es);
  return absl::OkStatus();
}

class LocalCommunicator final : public CallCommunicator {
 public:
  LocalCommunicator(Backend reported, bool check_on)
      : reported_(reported), queue_("mtc-comm-local", 0, 1, Limits{}, nullptr, check_on, run_local) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Backend backend() const override { return reported_; }
  // split: a world of one splits into itself: another world of one, with its own queue,
  // once the color is checked (after the collectives queued before).
  absl::StatusOr<std::shared_ptr<Communicator>> split(int color, int key) override {
    absl::StatusOr<SplitPlan> plan = agree_split(*this, color, key);
    if (!plan.ok()) return plan.status();
    return std::shared_ptr<Communicator>(std::make_shared<LocalCommunicator>(reported_, queue_.check_on()));
  }

 protected:
  std::shared_ptr<Work> issue(Call c) override { return queue_.issue(std::move(c)); }

 private:
  Backend reported_;
  HostQueue queue_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Communicator>> make_local(const CommOptions& opts, Backend reported) {
  return std::make_shared<LocalCommunicator>(reported, check_enabled(opts));
}

}  // namespace mtc::comm::internal
