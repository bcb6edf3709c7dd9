#include "net/admission.h"

#include <utility>

namespace tessera::net {

std::string_view refusal_name(Refusal refusal) {
  switch (refusal) {
    case Refusal::kNone: return "admitted";
    case Refusal::kPerHost: return "unauthenticated connections from one host (per-host limit)";
    case Refusal::kUnauthenticated: return "unauthenticated connections (total limit)";
    case Refusal::kAuthenticated: return "authenticated connections (max_connections)";
  }
  return "?";
}

Admission::Slot Admission::admit(std::string_view host) {
  Slot slot;
  std::lock_guard lock(mutex_);
  auto it = per_host_.find(host);
  const size_t from_host = it == per_host_.end() ? 0 : it->second;
  if (from_host >= limits_.unauthenticated_per_host) {
    slot.refusal_ = Refusal::kPerHost;
  } else if (unauthenticated_ >= limits_.unauthenticated) {
    slot.refusal_ = Refusal::kUnauthenticated;
  } else {
    if (it == per_host_.end()) it = per_host_.emplace(std::string(host), 0).first;
    ++it->second;
    ++unauthenticated_;
    slot.owner_ = this;
    slot.host_ = std::string(host);
  }
  return slot;
}

size_t Admission::unauthenticated() const {
  std::lock_guard lock(mutex_);
  return unauthenticated_;
}

size_t Admission::unauthenticated_from(std::string_view host) const {
  std::lock_guard lock(mutex_);
  auto it = per_host_.find(host);
  return it == per_host_.end() ? 0 : it->second;
}

size_t Admission::authenticated() const {
  std::lock_guard lock(mutex_);
  return authenticated_;
}

Admission::Slot::Slot(Slot&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      host_(std::move(other.host_)),
      authenticated_(std::exchange(other.authenticated_, false)),
      refusal_(other.refusal_) {}

Admission::Slot& Admission::Slot::operator=(Slot&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::exchange(other.owner_, nullptr);
    host_ = std::move(other.host_);
    authenticated_ = std::exchange(other.authenticated_, false);
    refusal_ = other.refusal_;
  }
  return *this;
}

Admission::Slot::~Slot() { release(); }

// Leaves the stranger pool in every case: a stranger that proved itself is no
// longer one, and one refused for want of room is dropped.
Refusal Admission::Slot::authenticate() {
  if (authenticated_) return Refusal::kNone;
  if (!owner_) return refusal_ == Refusal::kNone ? Refusal::kAuthenticated : refusal_;  // never admitted
  std::lock_guard lock(owner_->mutex_);
  auto it = owner_->per_host_.find(host_);
  if (--it->second == 0) owner_->per_host_.erase(it);
  --owner_->unauthenticated_;
  if (owner_->authenticated_ >= owner_->limits_.authenticated) {
    owner_ = nullptr;
    refusal_ = Refusal::kAuthenticated;
    return refusal_;
  }
  ++owner_->authenticated_;
  authenticated_ = true;
  return Refusal::kNone;
}

void Admission::Slot::release() {
  if (!owner_) return;
  std::lock_guard lock(owner_->mutex_);
  if (authenticated_) {
    --owner_->authenticated_;
  } else {
    auto it = owner_->per_host_.find(host_);
    if (--it->second == 0) owner_->per_host_.erase(it);
    --owner_->unauthenticated_;
  }
  owner_ = nullptr;
  authenticated_ = false;
}

std::string host_of(std::string_view address) {
  if (address.starts_with('[')) {  // "[v6]:port"
    const size_t close = address.find(']');
    return std::string(address.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  const size_t colon = address.rfind(':');
  return std::string(colon == std::string_view::npos ? address : address.substr(0, colon));
}

}  // namespace tessera::net
