#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace tessera {

namespace {

// How long a hand-off polls before it sleeps: 100 microseconds, or TESSERA_SPIN_US
// (0: sleep at once, as before spinning; for measuring what the spin buys).
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds spin = [] {
    const char* text = std::getenv("TESSERA_SPIN_US");
    return std::chrono::microseconds(text != nullptr ? std::strtol(text, nullptr, 10) : 100);
  }();
  return spin;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// True once done() holds, polling for at most spin_time().
template <typename Done>
bool spin_until(Done&& done) {
  const auto until = std::chrono::steady_clock::now() + spin_time();
  for (unsigned i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
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

void ThreadPool::notify_caller() {
  std::lock_guard lock(mutex_);
  done_cv_.notify_one();
}

void ThreadPool::take_chunks() {
  for (size_t i = next_.fetch_add(1); i < size(); i = next_.fetch_add(1)) {
    run_chunk(i);
    if (done_.fetch_add(1) + 1 == size()) notify_caller();
  }
}

// The caller runs chunk 0, takes chunks while any is left, and waits for the rest to be
// done. Then it closes the job (closed_ = its generation) and waits until no worker is
// inside it. A worker enters a job by counting itself in inside_ and only then reading
// closed_ (both sequentially consistent, as the caller's store of closed_ and its read of
// inside_): either the caller sees the worker inside and waits for it to leave, or the
// worker sees the job closed and leaves without reading it. So the job's fields and fn
// stay valid for every worker that reads them, and a worker that has not run since the
// job began costs the caller nothing.
void ThreadPool::parallel_for(size_t n, size_t align, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n <= align) {
    fn(0, n);
    return;
  }
  size_t generation = 0;
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    n_ = n;
    align_ = std::max<size_t>(1, align);
    next_.store(1);  // chunk 0 is the caller's
    done_.store(0);
    generation = generation_.fetch_add(1) + 1;  // releases the job to spinning workers
  }
  start_cv_.notify_all();  // no system call when no worker sleeps
  run_chunk(0);
  done_.fetch_add(1);
  take_chunks();
  const auto all_done = [this] { return done_.load() == size(); };
  if (!spin_until(all_done)) {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, all_done);
  }
  closed_.store(generation);
  const auto nobody_inside = [this] { return inside_.load() == 0; };
  if (!spin_until(nobody_inside)) {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, nobody_inside);
  }
}

void ThreadPool::worker_loop() {
  size_t seen = 0;
  for (;;) {
    const auto ready = [&] { return stop_.load() || generation_.load() != seen; };
    if (!spin_until(ready)) {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, ready);
    }
    if (stop_.load()) return;
    seen = generation_.load();
    inside_.fetch_add(1);
    if (closed_.load() < seen) take_chunks();  // else the job ended before this thread came
    if (inside_.fetch_sub(1) == 1) notify_caller();
  }
}

void for_chunks(ThreadPool& pool, size_t n, size_t unit, const std::function<void(size_t, size_t)>& fn) {
  std::atomic<size_t> next{0};
  const size_t parts = 2 * pool.size();
  pool.parallel_for(pool.size(), 1, [&](size_t, size_t) {
    size_t begin = next.load(std::memory_order_relaxed);
    while (begin < n) {
      const size_t size = std::max<size_t>(1, (n - begin) / parts / unit) * unit;
      const size_t end = std::min(n, begin + size);
      if (next.compare_exchange_weak(begin, end, std::memory_order_relaxed)) {
        fn(begin, end);
        begin = next.load(std::memory_order_relaxed);
      }
    }
  });
}

}  // namespace tessera
