// Tests of net::Socket, Listener, WakeFd and parse_endpoint on 127.0.0.1: data
// round trips, deadlines against a silent peer, the wake fd, and EOF messages.
#include "net/socket.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace tessera::net {
namespace {

using std::chrono::milliseconds;

struct Pair {
  Socket client;
  Socket server;
};

Pair connected_pair() {
  Result<Listener> listener = Listener::bind({"127.0.0.1", 0});
  EXPECT_TRUE(listener.ok()) << listener.status().to_string();
  EXPECT_NE(listener->port(), 0);
  Result<Socket> client = Socket::connect({"127.0.0.1", listener->port()}, deadline_after(milliseconds(2000)));
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  Result<Socket> server = listener->accept(deadline_after(milliseconds(2000)));
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return {std::move(client).value(), std::move(server).value()};
}

TEST(SocketTest, WritesAndReadsBothWays) {
  Pair pair = connected_pair();
  std::vector<uint8_t> sent(100000);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<uint8_t>(i * 7);
  std::thread writer([&] { EXPECT_TRUE(pair.client.write_all(sent, deadline_after(milliseconds(5000))).ok()); });
  std::vector<uint8_t> received(sent.size());
  ASSERT_TRUE(pair.server.read_exact(received, deadline_after(milliseconds(5000))).ok());
  writer.join();
  EXPECT_EQ(received, sent);

  const std::vector<uint8_t> reply = {1, 2, 3};
  ASSERT_TRUE(pair.server.write_all(reply, deadline_after(milliseconds(1000))).ok());
  std::vector<uint8_t> got(3);
  ASSERT_TRUE(pair.client.read_exact(got, deadline_after(milliseconds(1000))).ok());
  EXPECT_EQ(got, reply);
  EXPECT_NE(pair.client.peer_address().find("127.0.0.1:"), std::string::npos);
}

TEST(SocketTest, ReadFromSilentPeerHitsItsDeadline) {
  Pair pair = connected_pair();
  uint8_t byte = 0;
  const auto start = Clock::now();
  Status status = pair.client.read_exact({&byte, 1}, deadline_after(milliseconds(50)));
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(status.kind(), ErrorKind::kDisconnected);
  EXPECT_NE(status.message().find("timed out"), std::string::npos) << status.message();
  EXPECT_FALSE(is_interrupted(status));
  EXPECT_FALSE(is_closed_cleanly(status));
  EXPECT_GE(elapsed, milliseconds(50));
  EXPECT_LT(elapsed, milliseconds(2000));
}

TEST(SocketTest, AcceptHitsItsDeadline) {
  Result<Listener> listener = Listener::bind({"127.0.0.1", 0});
  ASSERT_TRUE(listener.ok());
  Result<Socket> accepted = listener->accept(deadline_after(milliseconds(50)));
  ASSERT_FALSE(accepted.ok());
  EXPECT_EQ(accepted.status().kind(), ErrorKind::kDisconnected);
  EXPECT_NE(accepted.status().message().find("timed out"), std::string::npos);
}

TEST(SocketTest, WakeFdInterruptsABlockedRead) {
  Pair pair = connected_pair();
  WakeFd wake;
  std::thread signaller([&] {
    std::this_thread::sleep_for(milliseconds(50));
    wake.signal();
  });
  uint8_t byte = 0;
  const auto start = Clock::now();
  Status status = pair.client.read_exact({&byte, 1}, deadline_after(milliseconds(10000)), wake.fd());
  signaller.join();
  EXPECT_TRUE(is_interrupted(status)) << status.to_string();
  EXPECT_EQ(status.cause(), Cause::kInterrupted);
  EXPECT_FALSE(is_closed_cleanly(status));
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
}

TEST(SocketTest, ShutdownWakesABlockedRead) {
  Pair pair = connected_pair();
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    pair.client.shutdown();
  });
  uint8_t byte = 0;
  Status status = pair.client.read_exact({&byte, 1}, deadline_after(milliseconds(10000)));
  closer.join();
  EXPECT_EQ(status.kind(), ErrorKind::kDisconnected);
}

TEST(SocketTest, EarlyEofNamesTheByteCounts) {
  Pair pair = connected_pair();
  const std::vector<uint8_t> three = {9, 8, 7};
  ASSERT_TRUE(pair.server.write_all(three, deadline_after(milliseconds(1000))).ok());
  pair.server = Socket();  // closes
  std::vector<uint8_t> eight(8);
  Status status = pair.client.read_exact(eight, deadline_after(milliseconds(2000)));
  EXPECT_EQ(status.kind(), ErrorKind::kDisconnected);
  EXPECT_NE(status.message().find("after 3 of 8 bytes"), std::string::npos) << status.message();
  EXPECT_FALSE(is_closed_cleanly(status));  // mid-read: not a clean end
}

// A close before the first byte of a read is the peer ending in order; the cause
// says so by type, whatever the message.
TEST(SocketTest, EofBeforeTheFirstByteIsAnOrderlyClose) {
  Pair pair = connected_pair();
  pair.server = Socket();  // closes
  std::vector<uint8_t> four(4);
  Status status = pair.client.read_exact(four, deadline_after(milliseconds(2000)));
  EXPECT_EQ(status.kind(), ErrorKind::kDisconnected);
  EXPECT_EQ(status.cause(), Cause::kClosedCleanly) << status.to_string();
  EXPECT_TRUE(is_closed_cleanly(status.with_context("previous stage")));
  EXPECT_FALSE(is_interrupted(status));
}

TEST(SocketTest, ParsesEndpoints) {
  Result<Endpoint> v4 = parse_endpoint("10.0.0.1:7100");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->host, "10.0.0.1");
  EXPECT_EQ(v4->port, 7100);
  Result<Endpoint> v6 = parse_endpoint("[::1]:80");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->to_string(), "[::1]:80");
  EXPECT_FALSE(parse_endpoint("nohost").ok());
  EXPECT_FALSE(parse_endpoint(":80").ok());
  EXPECT_FALSE(parse_endpoint("host:65536").ok());
  EXPECT_FALSE(parse_endpoint("host:").ok());
  EXPECT_FALSE(parse_endpoint("host:8x").ok());
}

}  // namespace
}  // namespace tessera::net
