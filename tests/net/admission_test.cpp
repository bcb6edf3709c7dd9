// Tests of net::Admission (strangers per host and in total, apart from
// authenticated connections; RAII slots) and core::LogLimiter (one line per kind
// per interval, with the count of the lines held back).
#include "net/admission.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/log_limiter.h"

namespace tessera::net {
namespace {

TEST(AdmissionTest, StrangersAreLimitedPerHostAndInTotal) {
  Admission admission({.unauthenticated_per_host = 2, .unauthenticated = 3, .authenticated = 4});
  Admission::Slot a1 = admission.admit("10.0.0.1");
  Admission::Slot a2 = admission.admit("10.0.0.1");
  Admission::Slot a3 = admission.admit("10.0.0.1");
  EXPECT_TRUE(a1.admitted());
  EXPECT_TRUE(a2.admitted());
  EXPECT_FALSE(a3.admitted());
  EXPECT_EQ(a3.refusal(), Refusal::kPerHost);
  EXPECT_EQ(admission.unauthenticated_from("10.0.0.1"), 2u);
  Admission::Slot b1 = admission.admit("10.0.0.2");
  EXPECT_TRUE(b1.admitted());
  Admission::Slot c1 = admission.admit("10.0.0.3");  // the total (3) is reached
  EXPECT_FALSE(c1.admitted());
  EXPECT_EQ(c1.refusal(), Refusal::kUnauthenticated);
  EXPECT_EQ(admission.unauthenticated(), 3u);
}

TEST(AdmissionTest, SlotsGiveTheirPlaceBackWhenDestroyed) {
  Admission admission({.unauthenticated_per_host = 1, .unauthenticated = 1, .authenticated = 1});
  {
    Admission::Slot slot = admission.admit("h");
    EXPECT_TRUE(slot.admitted());
    EXPECT_FALSE(admission.admit("h").admitted());
    Admission::Slot moved = std::move(slot);  // the place moves with it, once
    EXPECT_FALSE(slot.admitted());            // NOLINT(bugprone-use-after-move): a moved-from slot is empty
    EXPECT_EQ(admission.unauthenticated(), 1u);
  }
  EXPECT_EQ(admission.unauthenticated(), 0u);
  EXPECT_EQ(admission.unauthenticated_from("h"), 0u);
  {
    Admission::Slot slot = admission.admit("h");
    ASSERT_EQ(slot.authenticate(), Refusal::kNone);
    EXPECT_EQ(admission.authenticated(), 1u);
  }
  EXPECT_EQ(admission.authenticated(), 0u);
  EXPECT_TRUE(admission.admit("h").admitted());
}

// Strangers can fill only their own pool: with every stranger slot taken, the
// authenticated connections stay, and a stranger that completes its handshake
// frees its stranger slot for the next one.
TEST(AdmissionTest, StrangersNeverTakeTheAuthenticatedPlaces) {
  Admission admission({.unauthenticated_per_host = 8, .unauthenticated = 4, .authenticated = 2});
  Admission::Slot peer = admission.admit("10.0.0.1");
  ASSERT_EQ(peer.authenticate(), Refusal::kNone);
  std::vector<Admission::Slot> flood;
  for (int i = 0; i < 100; ++i) flood.push_back(admission.admit("10.0.0.66"));
  EXPECT_EQ(admission.unauthenticated(), 4u);
  EXPECT_EQ(admission.authenticated(), 1u);
  EXPECT_TRUE(peer.authenticated());
  // A second peer, whose handshake raced the flood and won a slot, authenticates.
  flood.resize(3);
  Admission::Slot second = admission.admit("10.0.0.2");
  ASSERT_TRUE(second.admitted());
  EXPECT_EQ(second.authenticate(), Refusal::kNone);
  EXPECT_EQ(admission.unauthenticated(), 3u);
  EXPECT_EQ(admission.authenticated(), 2u);
  EXPECT_EQ(second.authenticate(), Refusal::kNone);  // again: a no-op
  EXPECT_EQ(admission.authenticated(), 2u);
}

TEST(AdmissionTest, AFullAuthenticatedPoolRefusesAtTheHandshakeAndFreesTheStrangerSlot) {
  Admission admission({.unauthenticated_per_host = 8, .unauthenticated = 8, .authenticated = 1});
  Admission::Slot first = admission.admit("a");
  ASSERT_EQ(first.authenticate(), Refusal::kNone);
  Admission::Slot second = admission.admit("a");
  ASSERT_TRUE(second.admitted());
  EXPECT_EQ(second.authenticate(), Refusal::kAuthenticated);
  EXPECT_FALSE(second.admitted());
  EXPECT_EQ(admission.unauthenticated(), 0u);
  EXPECT_EQ(admission.authenticated(), 1u);
  EXPECT_EQ(Admission::Slot().authenticate(), Refusal::kAuthenticated);  // never admitted
}

TEST(AdmissionTest, CountsStayExactUnderConcurrentUse) {
  Admission admission({.unauthenticated_per_host = 1000, .unauthenticated = 1000, .authenticated = 1000});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&admission, t] {
      for (int i = 0; i < 2000; ++i) {
        Admission::Slot slot = admission.admit("h" + std::to_string((t + i) % 3));
        if (slot.admitted() && i % 2) (void)slot.authenticate();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(admission.unauthenticated(), 0u);
  EXPECT_EQ(admission.authenticated(), 0u);
}

TEST(AdmissionTest, HostOfAnAddress) {
  EXPECT_EQ(host_of("10.231.0.4:41234"), "10.231.0.4");
  EXPECT_EQ(host_of("[::1]:7000"), "::1");
  EXPECT_EQ(host_of("(unconnected)"), "(unconnected)");
}

}  // namespace
}  // namespace tessera::net

namespace tessera {
namespace {

using std::chrono::milliseconds;

TEST(LogLimiterTest, OneLinePerKindPerIntervalWithTheCountHeldBack) {
  LogLimiter limiter(milliseconds(1000));
  const LogLimiter::Clock::time_point t0{};
  EXPECT_EQ(limiter.filter("refused", "refused a", t0), "refused a");
  EXPECT_EQ(limiter.filter("refused", "refused b", t0 + milliseconds(10)), std::nullopt);
  EXPECT_EQ(limiter.filter("refused", "refused c", t0 + milliseconds(999)), std::nullopt);
  // Another kind has its own budget.
  EXPECT_EQ(limiter.filter("timeout", "timed out x", t0 + milliseconds(20)), "timed out x");
  EXPECT_EQ(limiter.filter("refused", "refused d", t0 + milliseconds(1000)), "refused d (and 2 more like it)");
  EXPECT_EQ(limiter.filter("refused", "refused e", t0 + milliseconds(1500)), std::nullopt);
  EXPECT_EQ(limiter.filter("refused", "refused f", t0 + milliseconds(5000)), "refused f (and 1 more like it)");
  EXPECT_EQ(limiter.filter("refused", "refused g", t0 + milliseconds(7000)), "refused g");
}

TEST(LogLimiterTest, AFloodPrintsAboutOneLinePerSecond) {
  LogLimiter limiter(milliseconds(1000));
  const LogLimiter::Clock::time_point t0{};
  int printed = 0;
  for (int i = 0; i < 100000; ++i) {  // 100,000 lines in 10 s
    if (limiter.filter("junk", "junk", t0 + std::chrono::microseconds(100 * i))) ++printed;
  }
  EXPECT_EQ(printed, 10);
}

}  // namespace
}  // namespace tessera
