#pragma once

// CPU work off the io thread: a few threads that run jobs handed to them. The gateway's one io
// thread serves every connection; a job that takes milliseconds there delays every other
// stream's events by as much (inspecting a 4 MiB request body: 11-13 ms in the bigbody bench).
// No Asio here: a job is a plain callable; net::OffThread (net/off_thread.hpp) hands a job's
// result back to the io thread.

#include <cstddef>
#include <memory>
#include <utility>

namespace fg::net {

class WorkPool {
 public:
  struct Job {
    virtual ~Job() = default;
    virtual void run() = 0;
  };

  enum class Priority {
    same,  // as the thread that made the pool
    // SCHED_IDLE: an ordinary thread that wakes up (the io thread with a stream's next event)
    // takes the core from a pool thread at once. With nice +10 instead, the kernel let the pool
    // thread finish its slice first: a 4 MiB body scanned beside 16 streams delayed their events
    // by +1.5 ms at p99; with SCHED_IDLE, +0.6 ms (bigbody bench, docs/benchmarks.md). The cost:
    // on cores kept busy by ordinary threads the pool gets a tiny share (weight 3 against 1024),
    // so a full queue is the back-pressure (OffThread then runs the work inline). Where the
    // system refuses SCHED_IDLE, the threads run at nice 19.
    idle,
  };
  // threads are started as jobs need them, at most max_threads, each at `priority`. Jobs beyond
  // the threads wait in a queue of at most max_queued.
  WorkPool(std::size_t max_threads, Priority priority, std::size_t max_queued = 4096);
  // close(), then waits for the jobs running now (queued ones are destroyed unrun).
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues job; true when taken (job is then empty). False, job left as it was, when the pool is
  // closed or its queue full: the caller runs it itself.
  bool submit(std::unique_ptr<Job>& job);
  template <class F>
  static std::unique_ptr<Job> make_job(F f) {
    struct Fn final : Job {
      explicit Fn(F g) : f(std::move(g)) {}
      void run() override { f(); }
      F f;
    };
    return std::make_unique<Fn>(std::move(f));
  }
  // No job starts once close() has returned; queued jobs are destroyed (on the caller's thread).
  void close();
  std::size_t threads() const;

 private:
  struct State;
  void work();
  std::unique_ptr<State> state_;
};

}  // namespace fg::net
