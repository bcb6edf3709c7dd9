// ThreadPool: a fixed set of workers for data-parallel loops on the inference
// thread. parallel_for splits [0, n) into one contiguous chunk per thread (the
// caller's thread takes chunk 0), so the work a thread gets is deterministic and
// results never depend on timing. Only one thread may call parallel_for at a
// time (the one inference thread that owns the pool).
// Hand-offs spin before they sleep: a worker polls for the next job, and the caller
// for the workers' completion, for up to 100 microseconds (TESSERA_SPIN_US) before
// waiting on a condition variable. Decode calls parallel_for about 130 times a token,
// and a futex wake-up each time cost more than the work on many cores.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
  // threads == 0 means all hardware threads.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n); chunk boundaries are
  // multiples of `align` (except n). Returns when all chunks are done.
  void parallel_for(size_t n, size_t align, const std::function<void(size_t, size_t)>& fn);

 private:
  void worker_loop(size_t index);
  void run_chunk(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // Written under mutex_ (so that a sleeper cannot miss a change), read by spinners
  // without it. generation_ and stop_ (polled by every idle worker) sit on a cache line
  // apart from pending_ (decremented by each worker as it finishes, polled by the
  // caller), so that finishing workers do not take the line the others poll away from
  // them: at 16 threads each decrement would otherwise invalidate 15 spinners' copies.
  alignas(64) std::atomic<size_t> generation_{0};
  std::atomic<bool> stop_{false};
  // The current job, read by the workers with generation_; written by parallel_for
  // before generation_ is bumped.
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  size_t align_ = 1;
  alignas(64) std::atomic<size_t> pending_{0};
};

}  // namespace tessera
