#include "common/net/off_thread.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace fg::net {

namespace {

int make_eventfd() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    throw std::system_error(errno, std::generic_category(), "eventfd");
  }
  return fd;
}

}  // namespace

OffThread::OffThread(boost::asio::any_io_executor io, WorkPool* pool)
    : pool_(pool), wake_(io, make_eventfd()) {
  ready_.reserve(64);
  taking_.reserve(64);
}

OffThread::~OffThread() {
  boost::system::error_code ignored;
  wake_.close(ignored);
  // Results never taken (the io thread stopped): their coroutines are destroyed with them.
  std::vector<std::unique_ptr<WorkPool::Job>> dropped;
  std::lock_guard lock(mutex_);
  dropped.swap(ready_);
}

void OffThread::start(std::unique_ptr<WorkPool::Job> job) {
  ++in_flight_;
  arm();
  if (pool_ == nullptr || !pool_->submit(job)) {
    job->run();  // delivers: the result is taken by the next drain, like any other
  }
}

void OffThread::deliver(std::unique_ptr<WorkPool::Job> completion) {
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    first = ready_.empty();
    ready_.push_back(std::move(completion));
  }
  if (first) {
    const std::uint64_t one = 1;
    // Cannot fail short of a closed descriptor (the counter is far from its limit).
    (void)!::write(wake_.native_handle(), &one, sizeof one);
  }
}

void OffThread::arm() {
  if (armed_) {
    return;
  }
  armed_ = true;
  wake_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                   [this](boost::system::error_code ec) {
                     if (ec == boost::asio::error::operation_aborted) {
                       return;  // closed: this object is going away
                     }
                     armed_ = false;
                     drain();
                   });
}

void OffThread::drain() {
  std::uint64_t count = 0;
  (void)!::read(wake_.native_handle(), &count, sizeof count);  // resets it; EAGAIN when 0
  {
    std::lock_guard lock(mutex_);
    ready_.swap(taking_);  // taking_ was empty: ready_ keeps a capacity
  }
  for (auto& completion : taking_) {
    --in_flight_;
    completion->run();  // resumes the coroutine that waited; it may start more work
    completion.reset();
  }
  taking_.clear();
  if (in_flight_ > 0) {
    arm();
  }
}

}  // namespace fg::net
