// Link: one peer of a TcpGroup. It holds the mutual-TLS control channel, the
// secret exported from that TLS session, and the plain-TCP data connection of the
// current generation with its sealer, opener and message counters.
//
// Sends run on the link's own sender thread, so a collective writes to every
// peer at once while its caller thread receives: piece k+1 is sealed while piece
// k is on the wire and the receiver opens and adds piece k-1. Receives run on
// the caller's thread, one message at a time, in the order the collective
// dictates (which fixes the summation order).
//
// Thread safety: post_send() and recv_*() are called by the group's one caller
// thread; the sender thread is internal; control() writes go through
// write_control_locked() from any thread. start_generation()/close_data() only
// while no send is in flight (wait_idle()).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "dist/control.h"
#include "dist/tamper.h"
#include "net/socket.h"
#include "net/tls.h"
#include "seal/key_schedule.h"
#include "seal/piece.h"

namespace tessera::dist {

struct LinkOptions {
  bool plain = false;             // pieces unsealed (headers still checked)
  uint32_t piece_bytes = 256 << 10;
  std::chrono::milliseconds progress_timeout{10000};
  std::vector<Tamper> tampers;    // tests only: applied to this rank's sends, by generation
};

class Link {
 public:
  Link(uint32_t self, uint32_t peer, net::TlsChannel control, const LinkOptions& options);
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
  void wait_idle();

  // Queues one message (all its pieces) for the sender thread; `bytes` must stay
  // alive until the future is ready. wake_fd interrupts its waits.
  std::future<Status> post_send(seal::Op op, std::span<const uint8_t> bytes, DType dtype, int wake_fd);
  // Receives one message of out.size() bytes straight into out.
  Status recv_into(seal::Op op, std::span<uint8_t> out, DType dtype, int wake_fd);
  // Receives one message of acc.size() elements and adds it into acc (first:
  // assigns), piece by piece, in f32.
  Status recv_add(seal::Op op, std::span<float> acc, DType dtype, bool first, int wake_fd);

 private:
  struct SendJob {
    seal::Op op;
    std::span<const uint8_t> bytes;
    DType dtype;
    int wake_fd;
    std::promise<Status> done;
  };

  seal::PieceContext context(seal::Op op, uint64_t total_bytes, DType dtype, bool outgoing) const;
  void sender_loop();
  Status send_message(SendJob& job);
  bool tampers(const seal::PieceContext& ctx) const;
  Result<std::span<const uint8_t>> frame_piece(const seal::PieceContext& ctx, std::span<const uint8_t> payload);
  Status write(std::span<const uint8_t> bytes, int wake_fd);
  // Receives the pieces of the message `ctx` describes; on_piece(offset, length,
  // fill) chooses where each piece's plaintext goes and calls fill(span) to put it there.
  template <typename PieceFn>
  Status recv_message(seal::PieceContext ctx, int wake_fd, PieceFn&& on_piece);
  Status describe(Status status, const seal::PieceContext& ctx) const;

  // Constant after construction.
  const uint32_t self_;
  const uint32_t peer_;
  const LinkOptions options_;
  net::TlsChannel control_;
  std::string peer_name_;
  seal::Secret secret_{};
  std::mutex control_write_mutex_;

  // The data plane of the current generation: set by start_generation() while idle.
  uint64_t generation_ = 0;
  net::Socket data_;
  std::optional<seal::Sealer> sealer_;
  std::optional<seal::Opener> opener_;
  uint64_t send_counter_ = 0;  // sender thread only
  uint64_t recv_counter_ = 0;  // caller thread only
  std::vector<uint8_t> send_buf_;
  std::vector<uint8_t> recv_buf_;
  std::vector<uint8_t> plain_buf_;       // recv_add: an opened piece before it is added
  std::optional<Tamper> tamper_;         // tests only: of this generation and direction
  std::vector<uint8_t> previous_piece_;  // tamper kReplay only

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<SendJob> jobs_;  // guarded by mutex_
  bool busy_ = false;         // guarded by mutex_
  bool stop_ = false;         // guarded by mutex_
  std::thread sender_;
};

}  // namespace tessera::dist
