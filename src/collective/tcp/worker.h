// Worker: one thread that runs posted tasks in order, each task's Status
// delivered through a future. Each Link has one for sends and one for receives,
// so a collective moves data to and from every peer at once while its caller
// adds what has arrived.
//
// Thread safety: post() and wait_idle() from any thread; the destructor fails
// tasks that have not started ("group closed") and joins the thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "core/status.h"

namespace tessera::collective {

class Worker {
 public:
  Worker();
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  std::future<Status> post(std::function<Status()> task);
  void wait_idle();  // until every posted task has finished

 private:
  struct Task {
    std::function<Status()> run;
    std::promise<Status> done;
  };
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;  // guarded by mutex_
  bool busy_ = false;       // guarded by mutex_
  bool stop_ = false;       // guarded by mutex_
  std::thread thread_;      // last: starts after the members above exist
};

// How many pieces of a message a receive has finished, for a caller that adds
// pieces as they arrive. Thread safety: any thread.
class Progress {
 public:
  void advance(uint32_t pieces_done);
  void finish();
  // Waits until piece `index` is done (true) or the receive ended without it (false).
  bool wait_for(uint32_t index);
  void reset();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  uint32_t done_ = 0;      // guarded by mutex_
  bool finished_ = false;  // guarded by mutex_
};

}  // namespace tessera::collective
