#include "pipeline/frame_channel.h"

#include <openssl/crypto.h>

#include <random>

#include "seal/hello.h"
#include "wire/control_frame.h"

namespace tessera::pipeline {

namespace {
constexpr std::string_view kBindingLabel = "EXPORTER-tessera-plain-binding-v1";
}  // namespace

Result<std::array<uint8_t, 32>> FrameChannel::binding_secret() const { return tls_->export_secret(kBindingLabel, {}); }

void FrameChannel::use_plain(net::Socket data) {
  std::lock_guard lock(write_mutex_);
  plain_ = std::move(data);
}

void FrameChannel::shutdown() {
  tls_->shutdown();
  plain_.shutdown();  // only ::shutdown(2) on the fd; use_plain() happens before anyone shuts down
}

Status FrameChannel::write_frame(std::span<const uint8_t> frame, net::Deadline deadline) {
  std::lock_guard lock(write_mutex_);
  return plain_.valid() ? plain_.write_all(frame, deadline) : tls_->write_all(frame, deadline);
}

Result<ConnectedChannel> connect_frame_channel(const net::Identity& self, const net::TrustFile& trust,
                                               const std::string& peer, net::Deadline deadline,
                                               std::chrono::milliseconds body_timeout) {
  const net::TrustedNode* node = trust.find_name(peer);
  if (!node) return Status::invalid_input("node '" + peer + "' is not in the trust file");
  TS_ASSIGN_OR_RETURN(net::Endpoint endpoint, net::parse_endpoint(node->address));
  TS_ASSIGN_OR_RETURN(net::Socket socket, net::Socket::connect_retrying(endpoint, deadline));
  TS_ASSIGN_OR_RETURN(net::TlsChannel tls, net::TlsChannel::client(std::move(socket), self, trust, peer, deadline));
  return ConnectedChannel{std::make_unique<FrameChannel>(std::move(tls), body_timeout), std::move(endpoint)};
}

Status bind_plain(FrameChannel& channel, const net::Endpoint& endpoint, net::Deadline deadline) {
  std::random_device random;
  const uint64_t binding = (uint64_t{random()} << 32 | random()) | 1;
  TS_RETURN_IF_ERROR(
      channel.write_frame(wire::encode_control(0, {{"type", kPlainMessage}, {"binding", binding}}), deadline));
  TS_ASSIGN_OR_RETURN(seal::Secret secret, channel.binding_secret());
  const auto hello = seal::seal_hello(secret, {0, 1, binding, true});
  OPENSSL_cleanse(secret.data(), secret.size());
  TS_ASSIGN_OR_RETURN(net::Socket socket, net::Socket::connect(endpoint, deadline));
  TS_RETURN_IF_ERROR(socket.write_all(hello, deadline));
  channel.use_plain(std::move(socket));
  return {};
}

Result<wire::Frame> FrameChannel::read_frame(const wire::FrameLimits& limits, net::Deadline deadline, int wake_fd) {
  // Only this (reader) thread switches to plain, so reading plain_ unlocked is safe.
  auto read = [&](std::span<uint8_t> bytes, net::Deadline until) {
    return plain_.valid() ? plain_.read_exact(bytes, until, wake_fd) : tls_->read_exact(bytes, until, wake_fd);
  };
  std::array<uint8_t, wire::kFramePrefixBytes> prefix_bytes;
  TS_RETURN_IF_ERROR(read(prefix_bytes, deadline));
  TS_ASSIGN_OR_RETURN(const wire::FramePrefix prefix, wire::decode_frame_prefix(prefix_bytes, limits));
  // Both lengths passed the limits, so this sum cannot overflow and the buffer
  // is bounded by what the receiver admitted.
  const size_t rest = size_t{prefix.header_bytes} + prefix.payload_bytes;
  buffer_.resize(wire::kFramePrefixBytes + rest);
  std::copy(prefix_bytes.begin(), prefix_bytes.end(), buffer_.begin());
  TS_RETURN_IF_ERROR(read(std::span(buffer_).subspan(wire::kFramePrefixBytes),
                          std::min(deadline, net::deadline_after(body_timeout_))));
  return wire::decode_frame(buffer_, limits);
}

}  // namespace tessera::pipeline
