// Admission: which connections a listener keeps. A connection is first a
// stranger (unauthenticated: its handshake has not completed); strangers are
// counted per peer host and in total, apart from authenticated connections,
// which have their own limit. So strangers can fill only their own pool: a
// flood of idle connections from one host takes at most `per_host` slots, and
// no flood evicts an authenticated connection or takes its place. (Strangers
// from more than unauthenticated / per_host hosts can fill their pool; then a
// new peer waits for a slot, which the handshake timeout frees, and retries.)
// A refused connection is closed by the caller at once, before it costs a
// thread.
//
// A Slot is the RAII token of one admitted connection: it starts in the
// unauthenticated pool, moves to the authenticated one with authenticate(), and
// gives its place back when destroyed.
//
// Thread safety: admit(), counts and every Slot operation may be called from any
// thread (one internal mutex). The Admission must outlive its slots.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace tessera::net {

struct AdmissionLimits {
  size_t unauthenticated_per_host = 8;  // strangers from one host at once
  size_t unauthenticated = 128;         // strangers at once, from all hosts
  size_t authenticated = 256;           // connections past their handshake
};

// Why a connection was refused; each kind is logged apart (and rate-limited).
enum class Refusal { kNone, kPerHost, kUnauthenticated, kAuthenticated };
std::string_view refusal_name(Refusal refusal);  // "per-host limit", ...

class Admission {
 public:
  class Slot {
   public:
    Slot() = default;  // admits nothing
    Slot(Slot&& other) noexcept;
    Slot& operator=(Slot&& other) noexcept;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot();

    bool admitted() const { return owner_ != nullptr; }
    Refusal refusal() const { return refusal_; }  // kNone when admitted
    bool authenticated() const { return authenticated_; }
    // Moves the connection into the authenticated pool; kAuthenticated (and the
    // slot released: the caller drops the connection) when that pool is full.
    // Calling it again is a no-op.
    Refusal authenticate();

   private:
    friend class Admission;
    void release();
    Admission* owner_ = nullptr;
    std::string host_;
    bool authenticated_ = false;
    Refusal refusal_ = Refusal::kNone;
  };

  explicit Admission(AdmissionLimits limits) : limits_(limits) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // A new connection from `host` (an address without its port): a slot in the
  // unauthenticated pool, or a refused slot saying which limit it met.
  Slot admit(std::string_view host);

  size_t unauthenticated() const;
  size_t unauthenticated_from(std::string_view host) const;
  size_t authenticated() const;
  const AdmissionLimits& limits() const { return limits_; }

 private:
  const AdmissionLimits limits_;  // never changes after construction

  mutable std::mutex mutex_;
  std::map<std::string, size_t, std::less<>> per_host_;  // guarded by mutex_: strangers by host (no zeros)
  size_t unauthenticated_ = 0;                           // guarded by mutex_
  size_t authenticated_ = 0;                             // guarded by mutex_
};

// "10.0.0.1" of "10.0.0.1:7000", "::1" of "[::1]:7000": the host part of
// Socket::peer_address(), by which strangers are counted.
std::string host_of(std::string_view address);

}  // namespace tessera::net
