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

  // threads are started as jobs need them, at most max_threads; each runs `nice` steps nicer than
  // the thread that made the pool (setpriority on the thread), so that on a busy machine the io
  // thread comes first. Jobs beyond the threads wait in a queue of at most max_queued.
  WorkPool(std::size_t max_threads, int nice, std::size_t max_queued = 4096);
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
