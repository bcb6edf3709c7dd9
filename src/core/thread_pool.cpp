#include "core/thread_pool.h"

#include <algorithm>

namespace tessera {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunk(size_t index) {
  // Chunk i is units [units * i / threads, units * (i + 1) / threads), computed in
  // 128 bits so that a huge n cannot wrap.
  using u128 = unsigned __int128;
  const size_t threads = size();
  const size_t units = n_ / align_ + (n_ % align_ != 0);
  const auto boundary = [&](size_t i) {
    return static_cast<size_t>(std::min<u128>(n_, u128{units} * i / threads * align_));
  };
  const size_t begin = boundary(index);
  const size_t end = boundary(index + 1);
  if (begin < end) (*fn_)(begin, end);
}

void ThreadPool::parallel_for(size_t n, size_t align, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n <= align) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    n_ = n;
    align_ = std::max<size_t>(1, align);
    pending_ = workers_.size();
    ++generation_;
  }
  start_cv_.notify_all();
  run_chunk(0);
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
}

void ThreadPool::worker_loop(size_t index) {
  size_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunk(index);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace tessera
