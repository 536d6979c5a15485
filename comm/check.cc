// Argument checking for every backend: validate() (what one rank can see wrong in its own
// call), check_call() (the debug-mode comparison of every rank's call, see
// communicator.h) and the agreement behind Communicator::split (every rank's color and
// key, judged alike on every rank: plan_split, agree_split). Messages name the collective first and then the bad value, so that a
// user can find the call that was wrong.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/internal.h"

namespace mtc::comm::internal {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "all_reduce";
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kAllToAll:
      return "all_to_all";
    case Kind::kAllToAllV:
      return "all_to_all_v";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kBarrier:
      return "barrier";
  }
  return "?";
}

namespace {

size_t sum(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}

bool valid_type(DataType t) { return t == DataType::kF32 || t == DataType::kI32; }
bool valid_op(ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kAvg || op == ReduceOp::kMax; }
bool reduces(Kind k) { return k == Kind::kAllReduce || k == Kind::kReduceScatter; }

// blocked: whether the call's buffers hold world blocks of `count` (send, recv or both).
bool blocked(Kind k) { return k == Kind::kAllGather || k == Kind::kReduceScatter || k == Kind::kAllToAll; }

}  // namespace

size_t Call::send_total() const {
  switch (kind) {
    case Kind::kAllToAllV:
      return sum(send_counts);
    case Kind::kBarrier:
      return 0;
    default:
      return count;  // one block of the blocked collectives, see internal.h
  }
}

size_t Call::recv_total() const { return kind == Kind::kAllToAllV ? sum(recv_counts) : count; }

absl::Status validate(const Call& c, int rank, int world, const Limits& limits) {
  const char* name = kind_name(c.kind);
  auto bad = [name](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", parts...));
  };
  if (c.kind == Kind::kBarrier) return absl::OkStatus();
  if (!valid_type(c.type))
    return bad("unknown data type ", static_cast<int>(c.type), " (expected f32 or i32)");
  if (reduces(c.kind) && !valid_op(c.op)) {
    return bad("unknown reduce op ", static_cast<int>(c.op), " (expected sum, avg or max)");
  }
  const size_t es = data_type_size(c.type);
  auto too_large = [&](const char* what, size_t n) -> absl::Status {
    if (n > limits.max_count) {
      return bad(what, "=", n, " is above ", limits.max_count, " (", limits.why, ")");
    }
    return absl::OkStatus();
  };

  if (c.kind == Kind::kAllToAllV) {
    if (c.send_counts.size() != static_cast<size_t>(world)) {
      return bad("send_counts has ", c.send_counts.size(), " entries, expected the world size ", world);
    }
    if (c.recv_counts.size() != static_cast<size_t>(world)) {
      return bad("recv_counts has ", c.recv_counts.size(), " entries, expected the world size ", world);
    }
    // What this rank sends itself is what it receives from itself.
    if (c.recv_counts[rank] != c.send_counts[rank]) {
      return bad("recv_counts[", rank, "]=", c.recv_counts[rank], " differs from send_counts[", rank,
                 "]=", c.send_counts[rank], " on the same rank (", rank, ")");
    }
    size_t send_off = 0, recv_off = 0;
    for (int r = 0; r < world; ++r) {
      if (absl::Status s = too_large(absl::StrCat("send_counts[", r, "]").c_str(), c.send_counts[r]); !s.ok())
        return s;
      if (absl::Status s = too_large(absl::StrCat("recv_counts[", r, "]").c_str(), c.recv_counts[r]); !s.ok())
        return s;
      if (send_off > limits.max_count || recv_off > limits.max_count) {
        return bad("the displacement of block ", r, " is above ", limits.max_count, " elements (", limits.why,
                   ")");
      }
      send_off += c.send_counts[r];
      recv_off += c.recv_counts[r];
    }
    if (send_off > SIZE_MAX / es || recv_off > SIZE_MAX / es)
      return bad("the counts overflow the address space");
    if (send_off > 0 && c.send == nullptr) return bad("send is null with ", send_off, " elements to send");
    if (recv_off > 0 && c.recv == nullptr) return bad("recv is null with ", recv_off, " elements to receive");
    if (send_off > 0 && recv_off > 0 && c.send == c.recv) {
      return bad("send and recv are the same buffer (in place is only for all_reduce and broadcast)");
    }
    return absl::OkStatus();
  }

  if (absl::Status s = too_large("count", c.count); !s.ok()) return s;
  const size_t blocks = blocked(c.kind) ? static_cast<size_t>(world) : 1;
  if (c.count > SIZE_MAX / es / blocks) {
    return bad("count=", c.count, " times ", blocks, " blocks overflows the address space");
  }
  if (c.kind == Kind::kBroadcast) {
    if (c.root < 0 || c.root >= world) return bad("root=", c.root, " is out of range for world size ", world);
    if (c.count > 0 && c.recv == nullptr) return bad("buf is null with count=", c.count);
    return absl::OkStatus();
  }
  if (c.count == 0) return absl::OkStatus();
  if (c.send == nullptr) return bad("send is null with count=", c.count);
  if (c.recv == nullptr) return bad("recv is null with count=", c.count);
  if (c.kind != Kind::kAllReduce && c.send == c.recv) {
    return bad("send and recv are the same buffer (in place is only for all_reduce and broadcast)");
  }
  return absl::OkStatus();
}

Descriptor describe(const Call& c, bool bad) {
  Descriptor d;
  d.kind = static_cast<uint8_t>(c.kind);
  d.bad = bad ? 1 : 0;
  if (c.kind == Kind::kBarrier) return d;
  d.type = static_cast<uint8_t>(c.type);
  if (reduces(c.kind)) d.op = static_cast<uint8_t>(c.op);
  // all_to_all_v's counts differ between ranks by design; check_call compares them
  // pairwise in a second exchange.
  if (c.kind != Kind::kAllToAllV) d.count = c.count;
  if (c.kind == Kind::kBroadcast) d.root = c.root;
  return d;
}

std::string describe_text(const Descriptor& d) {
  if (d.kind > static_cast<uint8_t>(Kind::kBarrier)) return absl::StrCat("unknown collective ", d.kind);
  const Kind k = static_cast<Kind>(d.kind);
  std::string s = kind_name(k);
  if (k == Kind::kBarrier) return s;
  if (k != Kind::kAllToAllV) absl::StrAppend(&s, " count=", d.count);
  absl::StrAppend(&s, " ", data_type_name(static_cast<DataType>(d.type)));
  if (reduces(k)) absl::StrAppend(&s, " ", reduce_op_name(static_cast<ReduceOp>(d.op)));
  if (k == Kind::kBroadcast) absl::StrAppend(&s, " root=", d.root);
  return s;
}

absl::Status check_call(Exchange* ex, const Call& c, const absl::Status& local, int rank, int world) {
  const char* name = kind_name(c.kind);
  std::vector<Descriptor> all(world);
  const Descriptor mine = describe(c, !local.ok());
  if (ex != nullptr) {
    if (absl::Status s = ex->all_gather(&mine, all.data(), sizeof(Descriptor)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(name, ": argument check: ", s.message()));
    }
  } else {
    all[rank] = mine;
  }
  // From here every rank sees the same descriptors and so takes the same branch: none
  // goes on to the counts exchange or the collective unless all do.
  if (!local.ok()) return local;
  for (int r = 0; r < world; ++r) {
    if (all[r].bad) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": rank ", r, " passed invalid arguments to ",
                                                     describe_text(all[r]), " (its own error says which)"));
    }
  }
  int first = -1, differing = 0;
  for (int r = 1; r < world; ++r) {
    if (std::memcmp(&all[r], &all[0], sizeof(Descriptor)) != 0) {
      if (first < 0) first = r;
      ++differing;
    }
  }
  if (first >= 0) {
    std::string msg = absl::StrCat(name, ": ranks disagree: rank 0 passed ", describe_text(all[0]), ", rank ",
                                   first, " passed ", describe_text(all[first]));
    if (differing > 1) absl::StrAppend(&msg, " (", differing, " ranks differ from rank 0)");
    return absl::InvalidArgumentError(msg);
  }
  if (c.kind != Kind::kAllToAllV || ex == nullptr) return absl::OkStatus();

  // Every rank's send and recv counts, so that every rank judges every pair alike.
  const size_t per_rank = 2 * static_cast<size_t>(world);
  std::vector<uint64_t> my_counts(per_rank), counts(per_rank * world);
  for (int r = 0; r < world; ++r) {
    my_counts[r] = c.send_counts[r];
    my_counts[world + r] = c.recv_counts[r];
  }
  if (absl::Status s = ex->all_gather(my_counts.data(), counts.data(), per_rank * sizeof(uint64_t));
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(name, ": argument check: ", s.message()));
  }
  for (int q = 0; q < world; ++q) {    // the receiver
    for (int r = 0; r < world; ++r) {  // the sender
      const uint64_t expects = counts[q * per_rank + world + r];
      const uint64_t sends = counts[r * per_rank + q];
      if (expects != sends) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": ranks disagree: rank ", q,
                                                       " passed recv_counts[", r, "]=", expects, ", rank ", r,
                                                       " passed send_counts[", q, "]=", sends));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SplitPlan> plan_split(std::span<const SplitRecord> all, int rank) {
  const int world = static_cast<int>(all.size());
  if (rank < 0 || rank >= world) {
    return absl::InternalError(absl::StrCat("split: rank ", rank, " is outside the ", world, " records"));
  }
  for (int r = 0; r < world; ++r) {
    if (all[r].color < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("split: rank ", r, " passed color=", all[r].color, ", expected a color >= 0"));
    }
  }
  for (int r = 0; r < world; ++r) {
    if (all[r].ok == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("split: setting up the new communicator failed on rank ", r, " (its own error says why)"));
    }
  }
  SplitPlan plan;
  for (int r = 0; r < world; ++r) {
    if (all[r].color == all[rank].color) plan.members.push_back(r);
  }
  // By key, ties by the rank in the parent (MPI_Comm_split's order).
  std::stable_sort(plan.members.begin(), plan.members.end(),
                   [&](int a, int b) { return all[a].key < all[b].key; });
  plan.world = static_cast<int>(plan.members.size());
  plan.rank = static_cast<int>(std::find(plan.members.begin(), plan.members.end(), rank) - plan.members.begin());
  return plan;
}

absl::StatusOr<SplitPlan> agree_split(Communicator& parent, int color, int key) {
  const SplitRecord mine{color, key, 1};
  std::vector<SplitRecord> all(static_cast<size_t>(parent.world_size()));
  absl::Status s = parent.all_gather(&mine, all.data(), 3, DataType::kI32)->wait();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("split: exchanging colors and keys: ", s.message()));
  return plan_split(all, parent.rank());
}

void divide(void* buf, size_t count, DataType t, int divisor) {
  if (divisor == 1) return;
  if (t == DataType::kF32) {
    float* p = static_cast<float*>(buf);
    const float d = static_cast<float>(divisor);
    for (size_t i = 0; i < count; ++i) p[i] /= d;
  } else {
    int32_t* p = static_cast<int32_t*>(buf);
    for (size_t i = 0; i < count; ++i) p[i] /= divisor;
  }
}

}  // namespace mtc::comm::internal
