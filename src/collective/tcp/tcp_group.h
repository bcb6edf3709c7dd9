// A Group of ranks in separate processes (or hosts), connected pairwise:
//   - a control channel over mutual TLS 1.3 between every pair (net/tls.h): the
//     peer's certificate decides its rank (its trust-file name's index in
//     `members`); aborts and rebuilds travel here;
//   - a plain TCP data connection per pair and generation, bound to that TLS
//     session by a sealed hello (seal/hello.h); tensor pieces travel here, sealed
//     with AES-256-GCM (seal/piece.h) unless `plain` is set.
// Rank r listens on its trust-file address; it connects to every rank below it
// and accepts every rank above it.
//
// all_sum is a reduce-scatter then an all-gather over direct connections: rank
// j owns chunk j, receives every rank's chunk j and adds them in rank order
// (rank 0 first), then sends the sum to every rank. Each rank moves
// 2 (N-1)/N of the data in and out, and every result is bitwise identical.
//
// Liveness: every rank sends a heartbeat on every control channel each
// kHeartbeatInterval from its own thread, whatever its caller computes, and
// judges its peers from the same thread: a peer silent (no control message) for
// heartbeat_timeout is frozen (SIGSTOP, a hung host) or cut off, and the group
// fails on this rank, which tells the others: a frozen rank fails every other
// rank's collective within about the heartbeat timeout, while a rank that is
// merely slow (a long prefill) keeps beating and is waited for (up to
// progress_timeout per piece). A rank that was itself stopped does not blame
// its peers for the time it slept: their aborts, waiting in its channels, fail
// it instead.
//
// Failure (collective/group.h): the first error on any rank latches the group failed,
// wakes every wait of this rank (WakeFd) and sends an abort to every peer, whose
// control reader latches and wakes them in turn. rebuild() agrees on the next
// generation over the control channels, then makes new data connections with
// fresh keys.
//
// Thread safety: as Group (one caller thread); internal threads: one sender, one
// receiver and one control reader per link, and the heartbeat thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "collective/group.h"
#include "collective/tcp/tamper.h"
#include "net/identity.h"
#include "net/trust.h"

namespace tessera::collective {

// How often a rank tells its peers it is alive (GroupOptions::heartbeat_timeout).
inline constexpr std::chrono::milliseconds kHeartbeatInterval{100};
inline constexpr std::chrono::milliseconds kMinHeartbeatTimeout{3 * kHeartbeatInterval};

struct GroupOptions {
  std::vector<std::string> members;                   // trust-file node names in rank order; includes this node
  bool plain = false;                                 // --plain: authenticated, but pieces are not sealed
  uint32_t piece_bytes = 256 << 10;                   // multiple of 4; the largest piece (Link::piece_bytes_for)
  std::chrono::milliseconds connect_timeout{30000};   // setup and rebuild
  std::chrono::milliseconds progress_timeout{10000};  // any one wait for a peer
  // A peer silent this long on its control channel fails the group; at least
  // kMinHeartbeatTimeout (a few missed heartbeats, not scheduling jitter).
  std::chrono::milliseconds heartbeat_timeout{500};
  std::vector<Tamper> tampers;  // tests only (tests/collective/rank_main.cpp)
};

Result<Group> connect_group(const net::Identity& identity, const net::TrustFile& trust, const GroupOptions& options);

}  // namespace tessera::collective
