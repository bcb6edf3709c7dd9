// Link: one peer of a TcpGroup. It holds the mutual-TLS control channel, the
// secret exported from that TLS session, and the plain-TCP data connection of the
// current generation with its sealer, opener and message counters.
//
// Sends run on the link's sender worker and receives on its receiver worker, so
// a collective moves data to and from every peer at once: piece k+1 is sealed
// while piece k is on the wire, and the receiver opens piece k-1 while its
// caller adds the pieces that have arrived, in rank order (which fixes the sum).
//
// Thread safety: post_send() and post_recv() are called by the group's one
// caller thread; control() writes go through write_control_locked() from any
// thread. start_generation() only after close_data() (no transfer in flight).
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "collective/group.h"
#include "collective/tcp/control_channel.h"
#include "collective/tcp/tamper.h"
#include "collective/tcp/worker.h"
#include "core/dtype.h"
#include "core/status.h"
#include "net/socket.h"
#include "net/tls.h"
#include "seal/key_schedule.h"
#include "seal/piece.h"

namespace tessera::collective {

struct LinkOptions {
  bool plain = false;  // pieces unsealed (headers still checked)
  uint32_t piece_bytes = 256 << 10;
  std::chrono::milliseconds progress_timeout{10000};
  std::vector<Tamper> tampers;  // tests only: applied to this rank's sends, by generation
};

class Link {
 public:
  // on_failure is called (from a worker thread) when a transfer fails for any
  // reason but the wake fd: the group latches it at once.
  Link(uint32_t self, uint32_t peer, net::TlsChannel control, const LinkOptions& options,
       std::function<void(Status)> on_failure);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  uint32_t peer() const { return peer_; }
  const std::string& peer_name() const { return peer_name_; }
  const seal::Secret& secret() const { return secret_; }
  net::TlsChannel& control() { return control_; }
  Status write_control_locked(const ControlMessage& message, net::Deadline deadline);

  // Binds a new data connection for `generation`: fresh keys, counters from 0.
  void start_generation(uint64_t generation, net::Socket data);
  // Wakes and closes the data connection (the sender's job fails at once).
  void close_data();

  // Queue one message (all its pieces) on the sender / receiver worker; the
  // buffer must stay alive until the future is ready. wake_fd interrupts their
  // waits. A receive reports each finished piece to `progress` (optional);
  // with Wait::kWhileAlive its first piece may take any time (the group's
  // heartbeats, not the progress timeout, bound a wait for a live peer).
  std::future<Status> post_send(seal::Op op, std::span<const uint8_t> bytes, DType dtype, int wake_fd);
  std::future<Status> post_recv(seal::Op op, std::span<uint8_t> out, DType dtype, int wake_fd, Progress* progress,
                                Wait wait = Wait::kBounded);
  // The piece size of a message of total_bytes: the configured size for large
  // messages, smaller ones (down to 16 KiB) for messages under 4 pieces, so
  // that sealing and opening still overlap the wire. Both ends derive it from
  // the size they expect; the associated data binds it.
  uint32_t piece_bytes_for(uint64_t total_bytes) const;

 private:
  seal::PieceContext context(seal::Op op, uint64_t total_bytes, DType dtype, bool outgoing) const;
  Status send_message(seal::Op op, std::span<const uint8_t> bytes, DType dtype, int wake_fd);
  Status recv_message(seal::Op op, std::span<uint8_t> out, DType dtype, int wake_fd, Progress* progress, Wait wait);
  bool tampers(const seal::PieceContext& ctx) const;
  Result<std::span<const uint8_t>> frame_piece(const seal::PieceContext& ctx, std::span<const uint8_t> payload,
                                               std::vector<uint8_t>& buffer);
  Status write(std::span<const uint8_t> bytes, int wake_fd);
  Status describe(Status status, const seal::PieceContext& ctx) const;

  // Constant after construction.
  const uint32_t self_;
  const uint32_t peer_;
  const LinkOptions options_;
  const std::function<void(Status)> on_failure_;
  net::TlsChannel control_;
  std::string peer_name_;
  seal::Secret secret_{};
  std::mutex control_write_mutex_;

  // The data plane of the current generation: set by start_generation() while idle.
  uint64_t generation_ = 0;
  net::Socket data_;
  std::optional<seal::Sealer> sealer_;
  std::optional<seal::Opener> opener_;
  uint64_t send_counter_ = 0;            // sender worker only
  uint64_t recv_counter_ = 0;            // receiver worker only
  std::vector<uint8_t> send_buffer_;     // sender worker: one piece on the wire
  std::vector<uint8_t> recv_buffer_;     // receiver worker
  std::optional<Tamper> tamper_;         // tests only: of this generation and direction
  std::vector<uint8_t> previous_piece_;  // tamper kReplay only

  // Last, so they stop (joining their threads) before the state above goes.
  Worker sender_;
  Worker receiver_;
};

}  // namespace tessera::collective
