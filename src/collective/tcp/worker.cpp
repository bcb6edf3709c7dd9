#include "collective/tcp/worker.h"

namespace tessera::collective {

Worker::Worker() : thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::future<Status> Worker::post(std::function<Status()> task) {
  Task t{std::move(task), {}};
  std::future<Status> done = t.done.get_future();
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(t));
  }
  cv_.notify_all();
  return done;
}

void Worker::wait_idle() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return !busy_ && tasks_.empty(); });
}

void Worker::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
    if (stop_) {
      for (Task& task : tasks_) task.done.set_value(Status::disconnected("[collective] group closed"));
      tasks_.clear();
      return;
    }
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    lock.unlock();
    task.done.set_value(task.run());
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

void Progress::advance(uint32_t pieces_done) {
  {
    std::lock_guard lock(mutex_);
    done_ = pieces_done;
  }
  cv_.notify_all();
}

void Progress::finish() {
  {
    std::lock_guard lock(mutex_);
    finished_ = true;
  }
  cv_.notify_all();
}

bool Progress::wait_for(uint32_t index) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done_ > index || finished_; });
  return done_ > index;
}

void Progress::reset() {
  std::lock_guard lock(mutex_);
  done_ = 0;
  finished_ = false;
}

}  // namespace tessera::collective
