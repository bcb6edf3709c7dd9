// Heartbeat: while it lives, a `heartbeat` control message (request id 0) goes
// out on a channel every `interval`, from its own thread. A stage runs one on
// its coordinator's connection when the setup asks for it ("heartbeat_ms"), so
// the coordinator tells a frozen stage (SIGSTOP, a hung host, a cut link) from a
// busy one: a long prefill never stops the heartbeats, a frozen process stops
// everything. A write that fails (the peer left, or read nothing for
// write_timeout) ends the heartbeats.
//
// Thread safety: FrameChannel serializes its writers; construct and destroy
// from one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "pipeline/frame_channel.h"

namespace tessera::pipeline {

class Heartbeat {
 public:
  Heartbeat(std::shared_ptr<FrameChannel> channel, std::chrono::milliseconds interval,
            std::chrono::milliseconds write_timeout, std::function<nlohmann::json()> message = {});
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void loop();

  std::shared_ptr<FrameChannel> channel_;
  const std::function<nlohmann::json()> message_;
  const std::chrono::milliseconds interval_;
  const std::chrono::milliseconds write_timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace tessera::pipeline
