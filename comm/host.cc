// The machinery of the host backends (local and MPI): HostWork, the comm thread and the
// queue in front of it, and CallCommunicator, which turns each Communicator method into
// a Call for any backend.
#include <pthread.h>

#include <chrono>
#include <utility>

#include "comm/internal.h"

namespace mtc::comm {
namespace {
thread_local bool tls_waits_at_once = false;
}  // namespace

WaitsAtOnce::WaitsAtOnce() : prev_(std::exchange(tls_waits_at_once, true)) {}
WaitsAtOnce::~WaitsAtOnce() { tls_waits_at_once = prev_; }
bool WaitsAtOnce::active() { return tls_waits_at_once; }

namespace internal {

absl::Status HostWork::wait() {
  std::shared_ptr<CommThread::Queue> q;
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return status_;
    q = queue_.lock();
    ticket = ticket_;
  }
  if (q != nullptr) CommThread::run_if_next(*q, ticket);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  return status_;
}

void HostWork::bind(std::weak_ptr<CommThread::Queue> q, uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_ = std::move(q);
  ticket_ = ticket;
}

bool HostWork::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

double HostWork::seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seconds_;
}

bool HostWork::interval(TimePoint* start, TimePoint* end) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!timed_) return false;
  *start = start_;
  *end = end_;
  return true;
}

void HostWork::finish(absl::Status s, TimePoint start) {
  const TimePoint end = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(s);
    seconds_ = std::chrono::duration<double>(end - start).count();
    start_ = start;
    end_ = end;
    timed_ = true;
    done_ = true;
  }
  cv_.notify_all();
}

CommThread::CommThread(std::string name) : q_(std::make_shared<Queue>()), thread_([q = q_] { loop(q); }) {
  // Named for debuggers and top -H ("mtc-comm-mpi"); Linux allows 15 characters.
  pthread_setname_np(thread_.native_handle(), name.substr(0, 15).c_str());
}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(q_->mu);
    q_->stop = true;
  }
  q_->cv.notify_all();
  thread_.join();
}

// Note [Waiting at once]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A collective op's kernel issues its call and waits for it at once, and the wait runs the
// call on the kernel's thread when the comm thread has not taken it (run_if_next). The
// comm thread, woken by the post, then finds the queue empty or busy and sleeps again: a
// wake-up for nothing on every call, a core taken for a few microseconds where every core
// runs a rank, and a race the comm thread sometimes wins, handing the call over twice.
// So under comm::WaitsAtOnce a call posted to an idle queue does not wake the comm thread,
// and run_if_next wakes it afterwards only when something was queued meanwhile. A post to a
// queue with a task queued or running never needs to: whichever thread runs that task
// reaches this one after it (the comm thread's loop, or run_if_next's wake at its end).
uint64_t CommThread::post(std::function<void()> task, bool wake) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(q_->mu);
    // Note [Waiting at once]. With a task queued or running, the comm thread is awake or
    // will be woken when that one ends (by run_if_next), and reaches this task after it.
    wake = wake && !q_->busy && q_->tasks.empty();
    ticket = q_->next_ticket++;
    q_->tasks.emplace_back(ticket, std::move(task));
  }
  if (wake) q_->cv.notify_one();
  return ticket;
}

bool CommThread::run_if_next(Queue& q, uint64_t ticket) {
  std::function<void()> task;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    if (q.busy || q.tasks.empty() || q.tasks.front().first != ticket) return false;
    task = std::move(q.tasks.front().second);
    q.tasks.pop_front();
    q.busy = true;
  }
  task();
  bool more;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    q.busy = false;
    more = q.stop || !q.tasks.empty();
  }
  // The comm thread, for what was queued meanwhile (posts while busy do not wake it) or
  // the destructor's drain; with neither it would wake for nothing.
  if (more) q.cv.notify_all();
  return true;
}

void CommThread::loop(const std::shared_ptr<Queue>& q) {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(q->mu);
      q->cv.wait(lock, [&] { return !q->busy && (q->stop || !q->tasks.empty()); });
      if (q->tasks.empty()) return;  // stop, and drained
      task = std::move(q->tasks.front().second);
      q->tasks.pop_front();
      q->busy = true;
    }
    task();
    std::lock_guard<std::mutex> lock(q->mu);
    q->busy = false;
  }
}

HostQueue::HostQueue(std::string name, int rank, int world, Limits limits, std::unique_ptr<Exchange> check,
                     bool check_on, Runner run)
    : rank_(rank),
      world_(world),
      limits_(limits),
      check_(std::move(check)),
      check_on_(check_on),
      run_(std::move(run)),
      thread_(std::move(name)) {}

HostQueue::~HostQueue() = default;

std::shared_ptr<Work> HostQueue::issue(Call c) {
  absl::Status local = validate(c, rank_, world_, limits_);
  // Without the check a rank rejects a bad call alone; with it the call still takes its
  // turn in the exchange, so that every rank fails it instead of waiting for this one.
  if (!local.ok() && !check_on_) return std::make_shared<HostWork>(std::move(local));
  auto work = std::make_shared<HostWork>();
  const uint64_t ticket = thread_.post(
      [this, work, c = std::move(c), local = std::move(local)] {
        const auto start = std::chrono::steady_clock::now();
        absl::Status s = check_on_ ? check_call(check_.get(), c, local, rank_, world_) : absl::OkStatus();
        if (s.ok()) s = run_(c);
        work->finish(std::move(s), start);
      },
      /*wake=*/!WaitsAtOnce::active());
  work->bind(thread_.queue(), ticket);
  return work;
}

absl::Status HostQueue::run(std::function<absl::Status()> task) {
  auto work = std::make_shared<HostWork>();
  const uint64_t ticket = thread_.post([work, task = std::move(task)] {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = task();
    work->finish(std::move(s), start);
  });
  work->bind(thread_.queue(), ticket);
  return work->wait();
}

namespace {
// plain_call: a collective's Call with one count for every rank.
Call plain_call(Kind k, const void* send, void* recv, size_t count, DataType t, ReduceOp op = ReduceOp::kSum) {
  Call c;
  c.kind = k;
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.type = t;
  c.op = op;
  return c;
}
}  // namespace

std::shared_ptr<Work> CallCommunicator::all_reduce(const void* send, void* recv, size_t count, DataType t,
                                                   ReduceOp op) {
  return issue(plain_call(Kind::kAllReduce, send, recv, count, t, op));
}

std::shared_ptr<Work> CallCommunicator::all_gather(const void* send, void* recv, size_t count, DataType t) {
  return issue(plain_call(Kind::kAllGather, send, recv, count, t));
}

std::shared_ptr<Work> CallCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DataType t,
                                                       ReduceOp op) {
  return issue(plain_call(Kind::kReduceScatter, send, recv, count, t, op));
}

std::shared_ptr<Work> CallCommunicator::all_to_all(const void* send, void* recv, size_t count, DataType t) {
  return issue(plain_call(Kind::kAllToAll, send, recv, count, t));
}

std::shared_ptr<Work> CallCommunicator::all_to_all_v(const void* send, std::span<const size_t> send_counts,
                                                     void* recv, std::span<const size_t> recv_counts,
                                                     DataType t) {
  Call c;
  c.kind = Kind::kAllToAllV;
  c.send = send;
  c.recv = recv;
  c.type = t;
  c.send_counts.assign(send_counts.begin(), send_counts.end());
  c.recv_counts.assign(recv_counts.begin(), recv_counts.end());
  return issue(std::move(c));
}

std::shared_ptr<Work> CallCommunicator::broadcast(void* buf, size_t count, DataType t, int root) {
  Call c;
  c.kind = Kind::kBroadcast;
  c.send = buf;
  c.recv = buf;
  c.count = count;
  c.type = t;
  c.root = root;
  return issue(std::move(c));
}

std::shared_ptr<Work> CallCommunicator::barrier() {
  Call c;
  c.kind = Kind::kBarrier;
  return issue(std::move(c));
}

}  // namespace internal
}  // namespace mtc::comm
