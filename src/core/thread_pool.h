// ThreadPool: a fixed set of workers for data-parallel loops on the inference
// thread. parallel_for splits [0, n) into one contiguous chunk per thread, the same
// chunks on every call, so results never depend on timing. The caller's thread runs
// chunk 0; the others are taken by whichever thread is free first, the caller
// included, and the call returns once every chunk is done and no worker is still
// inside it: a worker that the OS has not run yet (other work on the machine) holds
// nothing up, where before the call waited a time slice for it to run its chunk.
// Only one thread may call parallel_for at a time (the one inference thread that
// owns the pool).
// Hand-offs spin before they sleep: a worker polls for the next job, and the caller
// for the chunks' completion, for up to 100 microseconds (TESSERA_SPIN_US) before
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
  void worker_loop();
  // Runs chunks of the current job while any is left to take.
  void take_chunks();
  void run_chunk(size_t index);
  // Wakes a caller waiting on done_cv_ (under the mutex, so that one between its check
  // and its wait cannot miss it).
  void notify_caller();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // Written under mutex_ (so that a sleeper cannot miss a change), read by spinners
  // without it. generation_ and stop_ (polled by every idle worker) sit on a cache line
  // apart from the counters that change while a job runs, so that finishing workers do
  // not take the line the others poll away from them.
  alignas(64) std::atomic<size_t> generation_{0};
  std::atomic<bool> stop_{false};
  // The current job, read by the threads that take its chunks; written by
  // parallel_for before generation_ is bumped, and left alone until no worker is
  // inside the job.
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  size_t align_ = 1;
  // The next chunk to take, and how many are done. closed_: the last generation whose
  // job has ended (its chunks done); a worker counts itself in inside_ before it
  // looks at a job, and leaves it at once when closed_ says the job has ended, so the
  // caller waits only for workers that may still read it (see parallel_for).
  alignas(64) std::atomic<size_t> next_{0};
  std::atomic<size_t> done_{0};
  alignas(64) std::atomic<size_t> inside_{0};
  std::atomic<size_t> closed_{0};
};

// Calls fn(begin, end) over [0, n) in chunks taken by whichever thread is free next, so
// that a thread slowed by other work on the machine takes fewer chunks instead of the
// others waiting for its fixed share. Chunks shrink as the work runs out (guided
// scheduling): each takes 1 / (2 * threads) of what is left, in multiples of `unit` and
// at least `unit`, so that few chunks are taken and the threads still finish within about
// one unit of each other (with equal chunks of 1 / (8 * threads) of the work, the last
// thread could be left an eighth of its share to do alone). Which thread takes a chunk
// must not change its results (the callers compute each element by one call, in one order).
void for_chunks(ThreadPool& pool, size_t n, size_t unit, const std::function<void(size_t, size_t)>& fn);

}  // namespace tessera
