#include "collective/tcp/tcp_group.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "collective/tcp/acceptor.h"
#include "collective/tcp/control_channel.h"
#include "collective/tcp/link.h"
#include "collective/tcp/sum.h"
#include "core/check.h"
#include "seal/hello.h"

namespace tessera::collective {
namespace {

using seal::Op;
using std::chrono::milliseconds;

constexpr milliseconds kAbortSendTimeout{1000};
constexpr milliseconds kAbortGrace{50};
constexpr net::Clock::time_point kNeverHeard{};

std::string rank_text(size_t rank) { return "rank " + std::to_string(rank); }

class TcpGroup final : public GroupImpl {
 public:
  TcpGroup(const net::Identity& identity, const net::TrustFile& trust, const GroupOptions& options, uint32_t rank)
      : identity_(identity), trust_(trust), options_(options), rank_(rank), size_(options.members.size()) {}
  ~TcpGroup() override;

  Status start();

  int rank() const override { return static_cast<int>(rank_); }
  int size() const override { return static_cast<int>(size_); }
  uint64_t generation() const override {
    std::lock_guard lock(mutex_);
    return generation_;
  }
  Status failure() const override {
    std::lock_guard lock(mutex_);
    return failure_;
  }

  Status all_sum(std::span<uint8_t> data, DType dtype) override;
  Status reduce_scatter(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) override;
  Status all_gather(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) override;
  Status broadcast(std::span<uint8_t> data, DType dtype, int root, Wait wait) override;
  Status send(std::span<const uint8_t> data, DType dtype, int dst) override;
  Status recv(std::span<uint8_t> data, DType dtype, int src) override;
  Status rebuild() override;

 private:
  Result<net::Endpoint> address_of(uint32_t rank) const;
  Result<net::Socket> connect_with_retry(uint32_t rank, net::Deadline deadline);
  // Fills `early`: data connections of generation 0 that arrived (and were
  // authenticated) while control was being set up.
  Status connect_control(Acceptor& acceptor, net::Deadline deadline, std::vector<bool>& early);
  // `bound`: higher ranks whose data connection of `generation` is already bound.
  Status connect_data(Acceptor& acceptor, uint64_t generation, net::Deadline deadline, std::vector<bool> bound);
  Status accept_data(Acceptor::Opened& opened, uint64_t generation, std::vector<bool>& bound);
  void control_loop(uint32_t peer);
  // Sends heartbeats and fails the group when a peer has been silent for
  // options_.heartbeat_timeout (tcp_group.h: Liveness).
  void heartbeat_loop();
  // The first peer silent for longer than the heartbeat timeout at `now`, if any.
  std::optional<uint32_t> silent_peer(net::Clock::time_point now) const;
  void refuse(const std::string& why);

  // Returns the latched failure, or the wake fd of the working generation.
  Result<int> begin_op();
  // Latches `status` (unless it is the wake-up caused by an earlier failure),
  // tells every peer, and returns the group's failure.
  Status fail(Status status);
  void latch(Status status, bool tell_peers);
  // Waits for every transfer; any failure (already latched by the link) makes
  // the call return the group's failure.
  Status finish(std::vector<std::future<Status>>& transfers);
  // Receives into out(peer) from every peer and sends in(peer) to every peer.
  template <typename InFn, typename OutFn>
  void exchange(Op op, DType dtype, InFn in, OutFn out, int wake_fd, std::vector<std::future<Status>>& transfers,
                bool with_progress);
  // Phase 1 of all_sum and reduce_scatter: acc = sum over ranks of their chunk
  // rank_, where chunk(j) is what this rank contributes to rank j.
  template <typename ChunkFn>
  Status reduce_to_owner(Op op, DType dtype, size_t owned_elements, ChunkFn chunk, int wake_fd);
  Link& link(uint32_t peer) { return *links_[peer]; }
  std::function<void(Status)> on_failure() {
    return [this](Status status) { (void)fail(std::move(status)); };
  }
  LinkOptions link_options() const {
    return {options_.plain, options_.piece_bytes, options_.progress_timeout, options_.tampers};
  }

  // Constant after construction.
  const net::Identity identity_;
  const net::TrustFile trust_;
  const GroupOptions options_;
  const uint32_t rank_;
  const size_t size_;

  net::Listener listener_;
  std::vector<std::unique_ptr<Link>> links_;  // by rank; null for this rank
  std::vector<std::thread> control_readers_;
  net::WakeFd closing_;
  std::vector<float> acc_;                           // caller thread only
  std::vector<std::vector<uint8_t>> staging_;        // caller thread only: per peer, chunks to add
  std::vector<std::unique_ptr<Progress>> progress_;  // per peer, pieces of staging_ received

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;            // guarded by mutex_
  Status failure_;                     // guarded by mutex_
  std::unique_ptr<net::WakeFd> wake_;  // guarded by mutex_; signalled on failure
  Status next_abort_;  // guarded by mutex_: an abort of generation_ + 1, which this rank has not entered yet
  std::vector<uint64_t> rebuild_ready_;        // guarded by mutex_: per peer, highest generation announced
  std::vector<bool> control_lost_;             // guarded by mutex_
  std::vector<bool> departed_;                 // guarded by mutex_: per peer, said goodbye
  std::vector<net::Clock::time_point> heard_;  // guarded by mutex_: per peer, its last control message
  bool stopping_ = false;                      // guarded by mutex_: ends the heartbeat thread
  std::thread heartbeat_;
};

TcpGroup::~TcpGroup() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  uint64_t generation = 0;
  {
    std::lock_guard lock(mutex_);
    generation = generation_;
    if (failure_.ok()) failure_ = Status::disconnected("[collective] group closed");
    if (wake_) wake_->signal();
  }
  for (auto& link : links_) {
    if (link)
      (void)link->write_control_locked({ControlKind::kGoodbye, generation, ""}, net::deadline_after(milliseconds(200)));
  }
  closing_.signal();
  for (std::thread& reader : control_readers_) reader.join();
  links_.clear();
}

Result<net::Endpoint> TcpGroup::address_of(uint32_t rank) const {
  const net::TrustedNode* node = trust_.find_name(options_.members[rank]);
  if (!node)
    return Status::invalid_input("[collective] member '" + options_.members[rank] + "' is not in the trust file");
  return net::parse_endpoint(node->address);
}

void TcpGroup::refuse(const std::string& why) {
  std::fprintf(stderr, "[collective] rank %u refused a connection: %s\n", rank_, why.c_str());
}

Status TcpGroup::start() {
  wake_ = std::make_unique<net::WakeFd>();
  rebuild_ready_.assign(size_, 0);
  control_lost_.assign(size_, false);
  departed_.assign(size_, false);
  links_.resize(size_);
  staging_.resize(size_);
  for (size_t peer = 0; peer < size_; ++peer) progress_.push_back(std::make_unique<Progress>());
  TS_ASSIGN_OR_RETURN(net::Endpoint self_address, address_of(rank_));
  TS_ASSIGN_OR_RETURN(listener_, net::Listener::bind(self_address));
  const net::Deadline deadline = net::deadline_after(options_.connect_timeout);
  Acceptor acceptor(listener_, identity_, trust_, options_.progress_timeout);
  std::vector<bool> early(size_, false);
  TS_RETURN_IF_ERROR(connect_control(acceptor, deadline, early));
  {
    std::lock_guard lock(mutex_);
    heard_.assign(size_, kNeverHeard);
  }
  for (uint32_t peer = 0; peer < size_; ++peer) {
    if (peer != rank_) control_readers_.emplace_back([this, peer] { control_loop(peer); });
  }
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
  TS_RETURN_IF_ERROR(connect_data(acceptor, 0, deadline, std::move(early)));
  // Every peer is judged from now on (or from its first message): the group has
  // formed here, so the others are at most finishing their connections.
  std::lock_guard lock(mutex_);
  for (net::Clock::time_point& heard : heard_) heard = std::max(heard, net::Clock::now());
  return {};
}

Result<net::Socket> TcpGroup::connect_with_retry(uint32_t rank, net::Deadline deadline) {
  TS_ASSIGN_OR_RETURN(net::Endpoint endpoint, address_of(rank));
  Result<net::Socket> socket = net::Socket::connect_retrying(endpoint, deadline);
  if (!socket.ok())
    return socket.status().with_context("[collective] " + rank_text(rank) + " (" + options_.members[rank] + ")");
  return socket;
}

// Mutual TLS with every peer: connect to lower ranks, accept higher ones (each
// connection opens on its own thread, acceptor.h). A connection that fails the
// handshake (unknown certificate, not a member, a duplicate) is refused and the
// wait goes on for the real peer. A higher rank may already send its data
// connection: it does so only after this rank confirmed its TLS channel, which
// happens after its link is in links_, so its hello can be opened at once and
// no connection is kept unless it is authenticated.
Status TcpGroup::connect_control(Acceptor& acceptor, net::Deadline deadline, std::vector<bool>& early) {
  for (uint32_t peer = 0; peer < rank_; ++peer) {
    TS_ASSIGN_OR_RETURN(net::Socket socket, connect_with_retry(peer, deadline));
    TS_ASSIGN_OR_RETURN(net::TlsChannel channel, net::TlsChannel::client(std::move(socket), identity_, trust_,
                                                                         options_.members[peer], deadline));
    links_[peer] = std::make_unique<Link>(rank_, peer, std::move(channel), link_options(), on_failure());
  }
  size_t missing = size_ - 1 - rank_;
  while (missing > 0) {
    Result<Acceptor::Opened> opened = acceptor.next(deadline);
    if (!opened.ok()) {
      return opened.status().with_context("[collective] " + rank_text(rank_) + " waiting for " +
                                          std::to_string(missing) + " higher rank(s) to connect");
    }
    if (!opened->control) {  // a higher rank already at its data connections
      if (Status bound = accept_data(*opened, 0, early); !bound.ok()) refuse(bound.to_string());
      continue;
    }
    net::TlsChannel& channel = *opened->control;
    auto member = std::find(options_.members.begin(), options_.members.end(), channel.peer_name());
    const uint32_t peer = static_cast<uint32_t>(member - options_.members.begin());
    if (member == options_.members.end() || peer <= rank_ || links_[peer]) {
      refuse("node '" + channel.peer_name() + "' is not a higher rank of this group waiting to connect");
      continue;
    }
    if (Status confirmed = channel.confirm(deadline); !confirmed.ok()) {
      refuse(confirmed.to_string());
      continue;
    }
    links_[peer] = std::make_unique<Link>(rank_, peer, std::move(channel), link_options(), on_failure());
    --missing;
  }
  return {};
}

// Data connections of `generation`: connect to lower ranks and send a sealed
// hello; accept higher ranks and open theirs with the secret of their TLS session.
Status TcpGroup::connect_data(Acceptor& acceptor, uint64_t generation, net::Deadline deadline,
                              std::vector<bool> bound) {
  for (uint32_t peer = 0; peer < rank_; ++peer) {
    TS_ASSIGN_OR_RETURN(net::Socket socket, connect_with_retry(peer, deadline));
    const auto hello = seal::seal_hello(link(peer).secret(), {rank_, peer, generation, options_.plain});
    TS_RETURN_IF_ERROR(socket.write_all(hello, deadline));
    link(peer).start_generation(generation, std::move(socket));
  }
  size_t missing = size_ - 1 - rank_ - static_cast<size_t>(std::count(bound.begin(), bound.end(), true));
  while (missing > 0) {
    Result<Acceptor::Opened> opened = acceptor.next(deadline);
    if (!opened.ok()) {
      return opened.status().with_context("[collective] " + rank_text(rank_) + " generation " +
                                          std::to_string(generation) + ": waiting for " + std::to_string(missing) +
                                          " data connection(s)");
    }
    Status status = opened->control ? Status::invalid_input("TLS client '" + opened->control->peer_name() +
                                                            "' while every control channel is up")
                                    : accept_data(*opened, generation, bound);
    if (status.ok()) {
      --missing;
    } else {
      refuse(status.to_string());
    }
  }
  return {};
}

Status TcpGroup::accept_data(Acceptor::Opened& opened, uint64_t generation, std::vector<bool>& bound) {
  TS_ASSIGN_OR_RETURN(seal::Hello hello, seal::peek_hello(opened.hello));
  if (hello.sender <= rank_ || hello.sender >= size_ || !links_[hello.sender] || bound[hello.sender]) {
    return Status::invalid_input("data hello from " + opened.data.peer_address() + " names sender rank " +
                                 std::to_string(hello.sender) + ", which is not a connected higher rank still to bind");
  }
  const seal::Hello expected{hello.sender, rank_, generation, options_.plain};
  TS_RETURN_IF_ERROR(seal::open_hello(link(hello.sender).secret(), expected, opened.hello));
  link(hello.sender).start_generation(generation, std::move(opened.data));
  bound[hello.sender] = true;
  return {};
}

void TcpGroup::control_loop(uint32_t peer) {
  for (;;) {
    Result<ControlMessage> message =
        read_control(link(peer).control(), net::Clock::now() + std::chrono::hours(24 * 365), closing_.fd());
    if (!message.ok()) {
      if (net::is_interrupted(message.status())) return;  // closing
      std::lock_guard lock(mutex_);
      control_lost_[peer] = true;
      cv_.notify_all();
      // The peer's process or its link is gone: nothing more can be sent.
      if (failure_.ok()) {
        failure_ = Status::disconnected("[collective] " + rank_text(peer) + " (" + options_.members[peer] +
                                        "): control channel lost: " + message.status().message());
        wake_->signal();
        cv_.notify_all();
      }
      return;
    }
    {
      std::lock_guard lock(mutex_);
      heard_[peer] = net::Clock::now();
    }
    switch (message->kind) {
      case ControlKind::kAbort: {
        Status abort = Status::disconnected("[collective] " + rank_text(peer) + " aborted generation " +
                                            std::to_string(message->generation) + ": " + message->text);
        std::lock_guard lock(mutex_);
        if (message->generation == generation_ && failure_.ok()) {
          failure_ = abort;
          wake_->signal();
          cv_.notify_all();
        } else if (message->generation == generation_ + 1) {  // a peer already in the next one
          next_abort_ = abort;
        }
        break;
      }
      case ControlKind::kRebuild: {
        std::lock_guard lock(mutex_);
        rebuild_ready_[peer] = std::max(rebuild_ready_[peer], message->generation);
        cv_.notify_all();
        break;
      }
      case ControlKind::kGoodbye: {
        // Not a failure by itself (the leader closes its group after its last
        // step); the next collective with that peer finds its connection closed.
        std::lock_guard lock(mutex_);
        departed_[peer] = true;
        return;
      }
      case ControlKind::kHeartbeat: break;  // heard_ is all it updates
    }
  }
}

std::optional<uint32_t> TcpGroup::silent_peer(net::Clock::time_point now) const {
  for (uint32_t peer = 0; peer < size_; ++peer) {
    // A peer is judged from its first message, or from the end of start(),
    // on: before, it may still be connecting to other ranks (forming the
    // group has its own timeouts).
    if (peer != rank_ && heard_[peer] != kNeverHeard && !departed_[peer] && !control_lost_[peer] &&
        now - heard_[peer] > options_.heartbeat_timeout)
      return peer;
  }
  return std::nullopt;
}

void TcpGroup::heartbeat_loop() {
  std::unique_lock lock(mutex_);
  net::Clock::time_point asleep = net::Clock::now() - kHeartbeatInterval;  // the first beat goes at once
  for (;;) {
    if (cv_.wait_until(lock, asleep + kHeartbeatInterval, [this] { return stopping_; })) return;
    const net::Clock::time_point now = net::Clock::now();
    // Woken much later than asked: this process was stopped (or starved) and
    // heard nothing meanwhile; its peers' silence is its own. What they sent
    // meanwhile (an abort, if the group failed without it) is in its channels.
    if (now - asleep > kHeartbeatInterval + options_.heartbeat_timeout / 2) {
      for (net::Clock::time_point& heard : heard_) {
        if (heard != kNeverHeard) heard = std::max(heard, now);
      }
    }
    const uint64_t generation = generation_;
    const std::optional<uint32_t> silent = failure_.ok() ? silent_peer(now) : std::nullopt;
    const auto silent_ms = silent ? std::chrono::duration_cast<milliseconds>(now - heard_[*silent]).count() : 0;
    lock.unlock();
    for (auto& link : links_) {
      // A write to a peer that is gone fails; its control reader reports that.
      if (link)
        (void)link->write_control_locked({ControlKind::kHeartbeat, generation, ""},
                                         net::deadline_after(options_.heartbeat_timeout));
    }
    if (silent) {
      latch(Status::disconnected("[collective] " + rank_text(*silent) + " (" + options_.members[*silent] +
                                 "): silent for " + std::to_string(silent_ms) + " ms (heartbeat timeout " +
                                 std::to_string(options_.heartbeat_timeout.count()) +
                                 " ms): frozen, or its host or its link is down"),
            true);
    }
    lock.lock();
    asleep = net::Clock::now();
  }
}

Result<int> TcpGroup::begin_op() {
  std::lock_guard lock(mutex_);
  if (!failure_.ok()) return failure_;
  return wake_->fd();
}

void TcpGroup::latch(Status status, bool tell_peers) {
  uint64_t generation = 0;
  {
    std::lock_guard lock(mutex_);
    if (!failure_.ok()) return;
    failure_ = status;
    generation = generation_;
    wake_->signal();
  }
  if (!tell_peers) return;
  for (auto& link : links_) {
    if (link) {
      (void)link->write_control_locked({ControlKind::kAbort, generation, status.message()},
                                       net::deadline_after(kAbortSendTimeout));
    }
  }
}

Status TcpGroup::fail(Status status) {
  if (status.kind() == ErrorKind::kDisconnected && !net::is_interrupted(status)) {
    // A connection that broke is often the effect of a failure a peer found
    // first (it closes its data connections to rebuild); its abort, on the
    // control channel, is the better error, so give it a moment to arrive.
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, kAbortGrace, [this] { return !failure_.ok(); });
  }
  if (!net::is_interrupted(status)) latch(std::move(status), true);
  std::lock_guard lock(mutex_);
  return failure_;
}

Status TcpGroup::finish(std::vector<std::future<Status>>& transfers) {
  bool failed = false;
  for (auto& transfer : transfers) failed |= !transfer.get().ok();
  transfers.clear();
  if (!failed) return {};
  std::lock_guard lock(mutex_);
  return failure_;
}

template <typename InFn, typename OutFn>
void TcpGroup::exchange(Op op, DType dtype, InFn in, OutFn out, int wake_fd,
                        std::vector<std::future<Status>>& transfers, bool with_progress) {
  for (uint32_t peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    if (with_progress) progress_[peer]->reset();
    transfers.push_back(
        link(peer).post_recv(op, out(peer), dtype, wake_fd, with_progress ? progress_[peer].get() : nullptr));
  }
  for (uint32_t peer = 0; peer < size_; ++peer) {
    if (peer != rank_) transfers.push_back(link(peer).post_send(op, in(peer), dtype, wake_fd));
  }
}

// acc_ = the sum over ranks of their chunk(rank_), added piece by piece as the
// pieces arrive: piece k of rank 0, then of rank 1, ... (the fixed order).
template <typename ChunkFn>
Status TcpGroup::reduce_to_owner(Op op, DType dtype, size_t owned_elements, ChunkFn chunk, int wake_fd) {
  const size_t element = dtype_size(dtype);
  const size_t bytes = owned_elements * element;
  std::vector<std::future<Status>> transfers;
  for (uint32_t peer = 0; peer < size_; ++peer) {
    if (peer != rank_) staging_[peer].resize(bytes);
  }
  exchange(
      op, dtype, chunk, [&](uint32_t peer) { return std::span<uint8_t>(staging_[peer]); }, wake_fd, transfers, true);
  acc_.resize(owned_elements);
  const uint32_t piece_bytes = links_[rank_ == 0 ? 1 : 0]->piece_bytes_for(bytes);
  const uint32_t pieces = seal::piece_count(bytes, piece_bytes);
  bool arrived = true;
  for (uint32_t k = 0; k < pieces && arrived; ++k) {
    const size_t offset = size_t{k} * piece_bytes;
    const size_t length = seal::piece_payload_bytes(bytes, piece_bytes, k);
    std::span<float> acc = std::span(acc_).subspan(offset / element, length / element);
    for (uint32_t source = 0; source < size_ && arrived; ++source) {
      if (source == rank_) {
        accumulate(acc, chunk(rank_).subspan(offset, length), dtype, source == 0);
      } else if ((arrived = progress_[source]->wait_for(k))) {
        accumulate(acc, std::span<const uint8_t>(staging_[source]).subspan(offset, length), dtype, source == 0);
      }
    }
  }
  return finish(transfers);
}

Status TcpGroup::all_sum(std::span<uint8_t> data, DType dtype) {
  TS_RETURN_IF_ERROR(check_buffer(data, dtype, "all_sum"));
  TS_ASSIGN_OR_RETURN(const int wake_fd, begin_op());
  const size_t element = dtype_size(dtype);
  const uint64_t n = data.size() / element;
  auto begin = [&](uint32_t j) { return static_cast<size_t>(n * j / size_) * element; };
  auto chunk = [&](uint32_t j) { return data.subspan(begin(j), begin(j + 1) - begin(j)); };
  TS_RETURN_IF_ERROR(reduce_to_owner(
      Op::kAllSum, dtype, chunk(rank_).size() / element, [&](uint32_t j) { return std::span<const uint8_t>(chunk(j)); },
      wake_fd));
  store(acc_, chunk(rank_), dtype);
  std::vector<std::future<Status>> transfers;
  exchange(
      Op::kAllSum, dtype, [&](uint32_t) { return std::span<const uint8_t>(chunk(rank_)); }, chunk, wake_fd, transfers,
      false);
  return finish(transfers);
}

Status TcpGroup::reduce_scatter(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) {
  TS_RETURN_IF_ERROR(check_buffer(in, dtype, "reduce_scatter"));
  if (in.size() != out.size() * size_) {
    return Status::invalid_input("[collective] reduce_scatter: input " + std::to_string(in.size()) + " bytes != " +
                                 std::to_string(size_) + " ranks * output " + std::to_string(out.size()) + " bytes");
  }
  TS_ASSIGN_OR_RETURN(const int wake_fd, begin_op());
  auto chunk = [&](uint32_t j) { return in.subspan(j * out.size(), out.size()); };
  TS_RETURN_IF_ERROR(reduce_to_owner(Op::kReduceScatter, dtype, out.size() / dtype_size(dtype), chunk, wake_fd));
  store(acc_, out, dtype);
  return {};
}

Status TcpGroup::all_gather(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) {
  TS_RETURN_IF_ERROR(check_buffer(in, dtype, "all_gather"));
  if (out.size() != in.size() * size_) {
    return Status::invalid_input("[collective] all_gather: output " + std::to_string(out.size()) + " bytes != " +
                                 std::to_string(size_) + " ranks * input " + std::to_string(in.size()) + " bytes");
  }
  TS_ASSIGN_OR_RETURN(const int wake_fd, begin_op());
  if (!in.empty()) std::copy(in.begin(), in.end(), out.begin() + rank_ * in.size());
  std::vector<std::future<Status>> transfers;
  exchange(
      Op::kAllGather, dtype, [&](uint32_t) { return in; },
      [&](uint32_t peer) { return out.subspan(peer * in.size(), in.size()); }, wake_fd, transfers, false);
  return finish(transfers);
}

Status TcpGroup::broadcast(std::span<uint8_t> data, DType dtype, int root, Wait wait) {
  TS_RETURN_IF_ERROR(check_buffer(data, dtype, "broadcast"));
  if (root < 0 || static_cast<size_t>(root) >= size_) {
    return Status::invalid_input("[collective] broadcast: root " + std::to_string(root) + " in a group of " +
                                 std::to_string(size_));
  }
  TS_ASSIGN_OR_RETURN(const int wake_fd, begin_op());
  std::vector<std::future<Status>> transfers;
  if (static_cast<uint32_t>(root) != rank_) {
    transfers.push_back(link(root).post_recv(Op::kBroadcast, data, dtype, wake_fd, nullptr, wait));
  } else {
    for (uint32_t peer = 0; peer < size_; ++peer) {
      if (peer != rank_) transfers.push_back(link(peer).post_send(Op::kBroadcast, data, dtype, wake_fd));
    }
  }
  return finish(transfers);
}

Status TcpGroup::send(std::span<const uint8_t> data, DType dtype, int dst) {
  TS_RETURN_IF_ERROR(check_buffer(data, dtype, "send"));
  TS_RETURN_IF_ERROR(check_peer(dst, static_cast<int>(size_), static_cast<int>(rank_), "send"));
  TS_ASSIGN_OR_RETURN(const int wake_fd, begin_op());
  std::vector<std::future<Status>> transfers;
  transfers.push_back(link(dst).post_send(Op::kSend, data, dtype, wake_fd));
  return finish(transfers);
}

Status TcpGroup::recv(std::span<uint8_t> data, DType dtype, int src) {
  TS_RETURN_IF_ERROR(check_buffer(data, dtype, "recv"));
  TS_RETURN_IF_ERROR(check_peer(src, static_cast<int>(size_), static_cast<int>(rank_), "recv"));
  TS_ASSIGN_OR_RETURN(const int wake_fd, begin_op());
  std::vector<std::future<Status>> transfers;
  transfers.push_back(link(src).post_recv(Op::kSend, data, dtype, wake_fd, nullptr));
  return finish(transfers);
}

Status TcpGroup::rebuild() {
  // Peers are not told: each finishes what it is doing and calls rebuild() too
  // (a failure has told them already).
  latch(Status::disconnected("[collective] " + rank_text(rank_) + " is rebuilding the group"), false);
  for (auto& link : links_) {
    if (link) link->close_data();
  }
  uint64_t next = 0;
  {
    std::lock_guard lock(mutex_);
    next = generation_ + 1;
  }
  const net::Deadline deadline = net::deadline_after(options_.connect_timeout);
  for (auto& link : links_) {
    if (link) TS_RETURN_IF_ERROR(link->write_control_locked({ControlKind::kRebuild, next, ""}, deadline));
  }
  {
    std::unique_lock lock(mutex_);
    for (uint32_t peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      if (!cv_.wait_until(lock, deadline, [&] { return rebuild_ready_[peer] >= next || control_lost_[peer]; }) ||
          control_lost_[peer]) {
        return Status::disconnected("[collective] rebuild of generation " + std::to_string(next) + ": " +
                                    rank_text(peer) + (control_lost_[peer] ? " is gone" : " did not join in time"));
      }
    }
    // Every peer has left generation next-1 (its aborts came before its rebuild
    // message on the same ordered channel); aborts of `next` may already be here.
    generation_ = next;
    wake_ = std::make_unique<net::WakeFd>();
    failure_ = next_abort_;
    next_abort_ = Status();
    if (!failure_.ok()) wake_->signal();
  }
  Acceptor acceptor(listener_, identity_, trust_, options_.progress_timeout);
  Status status = connect_data(acceptor, next, deadline, std::vector<bool>(size_, false));
  return status.ok() ? status : fail(status);
}

}  // namespace

Result<Group> connect_group(const net::Identity& identity, const net::TrustFile& trust, const GroupOptions& options) {
  auto self = std::find(options.members.begin(), options.members.end(), identity.name);
  if (self == options.members.end()) {
    return Status::invalid_input("[collective] this node '" + identity.name + "' is not one of the group's members");
  }
  if (options.heartbeat_timeout < kMinHeartbeatTimeout) {
    return Status::invalid_input("[collective] heartbeat timeout " + std::to_string(options.heartbeat_timeout.count()) +
                                 " ms is below " + std::to_string(kMinHeartbeatTimeout.count()) +
                                 " ms (heartbeats go every " + std::to_string(kHeartbeatInterval.count()) + " ms)");
  }
  if (options.piece_bytes == 0 || options.piece_bytes % 4 != 0) {
    return Status::invalid_input("[collective] piece size " + std::to_string(options.piece_bytes) +
                                 " bytes is not a positive multiple of 4");
  }
  for (size_t i = 0; i < options.members.size(); ++i) {
    if (std::count(options.members.begin(), options.members.end(), options.members[i]) > 1) {
      return Status::invalid_input("[collective] member '" + options.members[i] + "' is listed twice");
    }
  }
  auto group =
      std::make_shared<TcpGroup>(identity, trust, options, static_cast<uint32_t>(self - options.members.begin()));
  if (options.members.size() == 1) return Group::local();
  TS_RETURN_IF_ERROR(group->start());
  return Group(group);
}

}  // namespace tessera::collective
