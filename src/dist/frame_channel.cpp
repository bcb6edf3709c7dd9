#include "dist/frame_channel.h"

namespace tessera::dist {

Status FrameChannel::write_frame(std::span<const uint8_t> frame, net::Deadline deadline) {
  std::lock_guard lock(write_mutex_);
  return tls_->write_all(frame, deadline);
}

Result<wire::Frame> FrameChannel::read_frame(const wire::FrameLimits& limits, net::Deadline deadline, int wake_fd) {
  std::array<uint8_t, wire::kFramePrefixBytes> prefix_bytes;
  TS_RETURN_IF_ERROR(tls_->read_exact(prefix_bytes, deadline, wake_fd));
  TS_ASSIGN_OR_RETURN(const wire::FramePrefix prefix, wire::decode_frame_prefix(prefix_bytes, limits));
  // Both lengths passed the limits, so this sum cannot overflow and the buffer
  // is bounded by what the receiver admitted.
  const size_t rest = size_t{prefix.header_bytes} + prefix.payload_bytes;
  buffer_.resize(wire::kFramePrefixBytes + rest);
  std::copy(prefix_bytes.begin(), prefix_bytes.end(), buffer_.begin());
  TS_RETURN_IF_ERROR(tls_->read_exact(std::span(buffer_).subspan(wire::kFramePrefixBytes),
                                      std::min(deadline, net::deadline_after(body_timeout_)), wake_fd));
  return wire::decode_frame(buffer_, limits);
}

}  // namespace tessera::dist
