#include "pipeline/heartbeat.h"

#include "wire/control_frame.h"

namespace tessera::pipeline {

Heartbeat::Heartbeat(std::shared_ptr<FrameChannel> channel, std::chrono::milliseconds interval,
                     std::chrono::milliseconds write_timeout, std::function<nlohmann::json()> message)
    : channel_(std::move(channel)),
      message_(std::move(message)),
      interval_(interval),
      write_timeout_(write_timeout),
      thread_([this] { loop(); }) {}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeat::loop() {
  const nlohmann::json bare = {{"type", "heartbeat"}};
  std::unique_lock lock(mutex_);
  while (!cv_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    const std::vector<uint8_t> beat = wire::encode_control(0, message_ ? message_() : bare);
    // The bound of every write on this channel: a frame cut short would break the stream.
    const Status sent = channel_->write_frame(beat, net::deadline_after(write_timeout_));
    lock.lock();
    if (!sent.ok()) return;
  }
}

}  // namespace tessera::pipeline
