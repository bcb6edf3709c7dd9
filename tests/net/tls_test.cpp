// Tests of node identities and TlsChannel on 127.0.0.1: mutual handshakes in
// fingerprint and CA mode, refusal of unknown or unexpected peers inside the
// handshake, deadlines, exported secrets, and one reader plus one writer thread
// on each end. Each test that covers a guard says which guard it was checked
// against: the guard was removed from the source, the test failed, the guard was
// restored.
#include "net/tls.h"

#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include "net/identity.h"
#include "net/socket.h"
#include "net/trust.h"

namespace tessera::net {
namespace {

using std::chrono::milliseconds;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ =
        std::filesystem::path(::testing::TempDir()) /
        ("tls_test_" + std::string(test->name()) + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

Identity make_identity(const std::filesystem::path& dir, const std::string& name) {
  Status written = write_identity(dir / name, name);
  EXPECT_TRUE(written.ok()) << written.to_string();
  Result<Identity> identity = load_identity(dir / name);
  EXPECT_TRUE(identity.ok()) << identity.status().to_string();
  return identity.ok() ? std::move(identity).value() : Identity{};
}

TrustFile fingerprint_trust(const std::vector<const Identity*>& nodes) {
  TrustFile trust;
  trust.cluster = "test";
  for (const Identity* identity : nodes) trust.nodes.push_back({identity->name, "127.0.0.1:1", identity->fingerprint});
  return trust;
}

// A server on a fresh port that accepts one connection and runs TlsChannel::server.
class TestServer {
 public:
  TestServer(const Identity& self, const TrustFile& trust, milliseconds timeout = milliseconds(5000)) {
    Result<Listener> listener = Listener::bind({"127.0.0.1", 0});
    EXPECT_TRUE(listener.ok()) << listener.status().to_string();
    listener_ = std::move(listener).value();
    thread_ = std::thread([this, &self, &trust, timeout] {
      const Deadline deadline = deadline_after(timeout);
      Result<Socket> socket = listener_.accept(deadline);
      if (!socket.ok()) {
        result_.emplace(socket.status());
        return;
      }
      Result<TlsChannel> channel = TlsChannel::server(std::move(socket).value(), self, trust, deadline);
      if (channel.ok()) {
        if (Status confirmed = channel->confirm(deadline); !confirmed.ok()) channel = confirmed;
      }
      result_.emplace(std::move(channel));
    });
  }
  ~TestServer() {
    if (thread_.joinable()) thread_.join();
  }
  uint16_t port() const { return listener_.port(); }
  // Waits for the handshake's outcome.
  Result<TlsChannel>& result() {
    if (thread_.joinable()) thread_.join();
    return *result_;
  }

 private:
  Listener listener_;
  std::optional<Result<TlsChannel>> result_;
  std::thread thread_;
};

Result<TlsChannel> connect_client(uint16_t port, const Identity& self, const TrustFile& trust,
                                  const std::string& expected_peer, milliseconds timeout = milliseconds(5000)) {
  const Deadline deadline = deadline_after(timeout);
  TS_ASSIGN_OR_RETURN(Socket socket, Socket::connect({"127.0.0.1", port}, deadline));
  return TlsChannel::client(std::move(socket), self, trust, expected_peer, deadline);
}

bool contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// ---- Identity ----

TEST(IdentityTest, WritesAndLoadsAnEd25519Identity) {
  TempDir dir;
  ASSERT_TRUE(write_identity(dir.path() / "node", "stage0").ok());
  struct stat key_stat {};
  ASSERT_EQ(::stat((dir.path() / "node" / "key.pem").c_str(), &key_stat), 0);
  EXPECT_EQ(key_stat.st_mode & 0777, 0600u);
  Result<Identity> identity = load_identity(dir.path() / "node");
  ASSERT_TRUE(identity.ok()) << identity.status().to_string();
  EXPECT_EQ(identity->name, "stage0");
  EXPECT_EQ(EVP_PKEY_get_id(identity->key.get()), EVP_PKEY_ED25519);
  EXPECT_TRUE(is_fingerprint(identity->fingerprint));
  EXPECT_EQ(identity->fingerprint, certificate_fingerprint(identity->cert.get()));
  EXPECT_EQ(identity->fingerprint.find_first_of("ABCDEF"), std::string::npos);
  EXPECT_EQ(X509_get_version(identity->cert.get()), X509_VERSION_3);
  // About ten years.
  int days = 0, seconds = 0;
  ASSERT_EQ(ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(identity->cert.get()),
                           X509_get0_notAfter(identity->cert.get())),
            1);
  EXPECT_GE(days, 3650);
  EXPECT_LE(days, 3652);

  // Two keys, two random serials and fingerprints.
  Identity other = make_identity(dir.path(), "stage0b");
  EXPECT_NE(other.fingerprint, identity->fingerprint);
  EXPECT_NE(ASN1_INTEGER_cmp(X509_get0_serialNumber(other.cert.get()), X509_get0_serialNumber(identity->cert.get())),
            0);
}

TEST(IdentityTest, RefusesToOverwriteAKey) {
  TempDir dir;
  ASSERT_TRUE(write_identity(dir.path(), "a").ok());
  Result<Identity> before = load_identity(dir.path());
  ASSERT_TRUE(before.ok());
  Status again = write_identity(dir.path(), "b");
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(contains(again, (dir.path() / "key.pem").string())) << again.message();
  EXPECT_TRUE(contains(again, "already exists")) << again.message();
  Result<Identity> after = load_identity(dir.path());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->fingerprint, before->fingerprint);
  EXPECT_FALSE(write_identity(dir.path() / "x", "").ok());
  EXPECT_FALSE(write_identity(dir.path() / "y", std::string(65, 'n')).ok());
}

TEST(IdentityTest, LoadErrorsNameTheFileAndTheProblem) {
  TempDir dir;
  Result<Identity> missing = load_identity(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().kind(), ErrorKind::kNotFound);
  EXPECT_TRUE(contains(missing.status(), (dir.path() / "key.pem").string() + ": does not exist"));

  make_identity(dir.path(), "a");
  make_identity(dir.path(), "b");
  std::filesystem::remove(dir.path() / "a" / "cert.pem");
  Result<Identity> no_cert = load_identity(dir.path() / "a");
  ASSERT_FALSE(no_cert.ok());
  EXPECT_TRUE(contains(no_cert.status(), (dir.path() / "a" / "cert.pem").string() + ": does not exist"));

  // b's certificate next to a's key.
  std::filesystem::copy_file(dir.path() / "b" / "cert.pem", dir.path() / "a" / "cert.pem");
  Result<Identity> mismatch = load_identity(dir.path() / "a");
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(contains(mismatch.status(), "does not match the certificate")) << mismatch.status().message();

  {
    std::FILE* f = std::fopen((dir.path() / "b" / "key.pem").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("not a key\n", f);
    std::fclose(f);
  }
  Result<Identity> not_pem = load_identity(dir.path() / "b");
  ASSERT_FALSE(not_pem.ok());
  EXPECT_TRUE(contains(not_pem.status(), (dir.path() / "b" / "key.pem").string() + ": not a PEM private key"))
      << not_pem.status().message();
}

// ---- Handshakes in fingerprint mode ----

TEST(TlsTest, MutualHandshakeNamesBothPeersAndCarriesData) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  Identity client_id = make_identity(dir.path(), "client-node");
  TrustFile trust = fingerprint_trust({&server_id, &client_id});
  TestServer server(server_id, trust);
  Result<TlsChannel> client = connect_client(server.port(), client_id, trust, "server-node");
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  ASSERT_TRUE(server.result().ok()) << server.result().status().to_string();
  TlsChannel& server_channel = *server.result();
  EXPECT_EQ(client->peer_name(), "server-node");
  EXPECT_EQ(server_channel.peer_name(), "client-node");

  const std::vector<uint8_t> hello = {'h', 'e', 'l', 'l', 'o'};
  ASSERT_TRUE(client->write_all(hello, deadline_after(milliseconds(2000))).ok());
  std::vector<uint8_t> got(hello.size());
  ASSERT_TRUE(server_channel.read_exact(got, deadline_after(milliseconds(2000))).ok());
  EXPECT_EQ(got, hello);
  ASSERT_TRUE(server_channel.write_all(hello, deadline_after(milliseconds(2000))).ok());
  ASSERT_TRUE(client->read_exact(got, deadline_after(milliseconds(2000))).ok());
  EXPECT_EQ(got, hello);

  // A closed channel: the reader learns how many bytes arrived.
  server_channel.shutdown();
  std::vector<uint8_t> four(4);
  Status eof = client->read_exact(four, deadline_after(milliseconds(2000)));
  EXPECT_EQ(eof.kind(), ErrorKind::kDisconnected);
  EXPECT_TRUE(contains(eof, "after 0 of 4 bytes")) << eof.message();
  EXPECT_TRUE(is_closed_cleanly(eof)) << eof.to_string();  // close_notify before the first byte
}

TEST(TlsTest, ExportedSecretsMatchPerSessionAndLabel) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  Identity client_id = make_identity(dir.path(), "client-node");
  TrustFile trust = fingerprint_trust({&server_id, &client_id});
  const std::vector<uint8_t> context = {1, 2, 3};
  std::array<uint8_t, 32> first_session{};
  for (int session = 0; session < 2; ++session) {
    TestServer server(server_id, trust);
    Result<TlsChannel> client = connect_client(server.port(), client_id, trust, "server-node");
    ASSERT_TRUE(client.ok()) << client.status().to_string();
    ASSERT_TRUE(server.result().ok()) << server.result().status().to_string();
    auto a = client->export_secret("tessera seal", context);
    auto b = server.result()->export_secret("tessera seal", context);
    auto other_label = client->export_secret("tessera other", context);
    auto other_context = client->export_secret("tessera seal", std::vector<uint8_t>{1, 2, 4});
    ASSERT_TRUE(a.ok() && b.ok() && other_label.ok() && other_context.ok());
    EXPECT_EQ(*a, *b);
    EXPECT_NE(*a, *other_label);
    EXPECT_NE(*a, *other_context);
    EXPECT_NE(*a, (std::array<uint8_t, 32>{}));
    if (session == 0) {
      first_session = *a;
    } else {
      EXPECT_NE(*a, first_session);
    }
  }
}

// Fails without the fingerprint check in judge_peer (called by verify_peer).
TEST(TlsTest, ServerRefusesAnUnknownClientCertificate) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  Identity client_id = make_identity(dir.path(), "client-node");
  Identity stranger = make_identity(dir.path(), "client-node-copy");
  TrustFile trust = fingerprint_trust({&server_id, &client_id});
  TestServer server(server_id, trust);
  Result<TlsChannel> client = connect_client(server.port(), stranger, trust, "server-node");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().kind(), ErrorKind::kDisconnected) << client.status().to_string();
  EXPECT_TRUE(contains(client.status(), "(node 'server-node') did not accept this node")) << client.status().message();
  ASSERT_FALSE(server.result().ok());
  const Status& refused = server.result().status();
  EXPECT_EQ(refused.kind(), ErrorKind::kInvalidInput) << refused.to_string();
  EXPECT_TRUE(contains(refused, "TLS peer 127.0.0.1:")) << refused.message();
  EXPECT_TRUE(contains(refused, "presented certificate " + stranger.fingerprint + " which is not in the trust file"))
      << refused.message();
}

// A TLS 1.3 client outside tessera (plain OpenSSL, no check of the server),
// presenting `identity`'s certificate, or none when null.
struct RawClient {
  RawClient(uint16_t port, const Identity* identity)
      : socket(Socket::connect({"127.0.0.1", port}, deadline_after(milliseconds(2000)))) {
    EXPECT_TRUE(socket.ok()) << socket.status().to_string();
    SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
    if (identity) {
      EXPECT_EQ(SSL_CTX_use_certificate(ctx.get(), identity->cert.get()), 1);
      EXPECT_EQ(SSL_CTX_use_PrivateKey(ctx.get(), identity->key.get()), 1);
    }
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
    ssl.reset(SSL_new(ctx.get()));
    if (socket.ok()) SSL_set_fd(ssl.get(), socket->fd());
  }
  // Drives the client handshake over the non-blocking socket: true when this
  // side is done, false on an error (in `error`) or after 3 s.
  bool handshake() {
    if (!socket.ok()) return false;
    const Deadline deadline = deadline_after(milliseconds(3000));
    int rc = 0;
    while ((rc = SSL_connect(ssl.get())) != 1) {
      error = SSL_get_error(ssl.get(), rc);
      if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) return false;
      if (!(error == SSL_ERROR_WANT_READ ? socket->wait_readable(deadline) : socket->wait_writable(deadline)).ok())
        return false;
    }
    return true;
  }

  Result<Socket> socket;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx{SSL_CTX_new(TLS_client_method()), SSL_CTX_free};
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl{nullptr, SSL_free};
  int error = SSL_ERROR_NONE;
};

// A client outside tessera that finishes its side of the handshake and writes at
// once: the server refuses it inside the handshake and returns no channel, so
// none of those bytes is ever handed to the application.
// Fails without the fingerprint check in judge_peer.
TEST(TlsTest, RefusedClientsFirstBytesAreNeverRead) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  Identity client_id = make_identity(dir.path(), "client-node");
  Identity stranger = make_identity(dir.path(), "stranger");
  TrustFile trust = fingerprint_trust({&server_id, &client_id});
  TestServer server(server_id, trust);

  RawClient client(server.port(), &stranger);
  // TLS 1.3: the client is done before the server has judged its certificate.
  ASSERT_TRUE(client.handshake()) << "client handshake error " << client.error;
  const char secret[] = "application bytes";
  size_t written = 0;
  SSL_write_ex(client.ssl.get(), secret, sizeof secret, &written);

  ASSERT_FALSE(server.result().ok());
  EXPECT_EQ(server.result().status().kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(contains(server.result().status(), stranger.fingerprint + " which is not in the trust file"));
}

TEST(TlsTest, ServerRefusesAClientWithoutACertificate) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  TrustFile trust = fingerprint_trust({&server_id});
  TestServer server(server_id, trust);
  RawClient client(server.port(), nullptr);
  (void)client.handshake();  // the server refuses it: the outcome on this side does not matter
  ASSERT_FALSE(server.result().ok());
  EXPECT_EQ(server.result().status().kind(), ErrorKind::kDisconnected) << server.result().status().to_string();
  EXPECT_TRUE(contains(server.result().status(), "certificate")) << server.result().status().message();
}

// Fails without the expected_peer check in judge_peer (fingerprint mode).
TEST(TlsTest, ClientRefusesATrustedServerThatIsNotTheExpectedPeer) {
  TempDir dir;
  Identity stage0 = make_identity(dir.path(), "stage0");
  Identity stage1 = make_identity(dir.path(), "stage1");
  Identity client_id = make_identity(dir.path(), "coordinator");
  TrustFile trust = fingerprint_trust({&stage0, &stage1, &client_id});
  TestServer server(stage1, trust);
  Result<TlsChannel> client = connect_client(server.port(), client_id, trust, "stage0");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(contains(client.status(), "presented the certificate of node 'stage1'")) << client.status().message();
  EXPECT_TRUE(contains(client.status(), "expected node 'stage0'")) << client.status().message();
  EXPECT_FALSE(server.result().ok());
  EXPECT_EQ(server.result().status().kind(), ErrorKind::kDisconnected);
}

TEST(TlsTest, ClientRefusesAnExpectedPeerOutsideTheTrustFile) {
  TempDir dir;
  Identity client_id = make_identity(dir.path(), "coordinator");
  TrustFile trust = fingerprint_trust({&client_id});
  Result<Listener> listener = Listener::bind({"127.0.0.1", 0});
  ASSERT_TRUE(listener.ok());
  Result<TlsChannel> client = connect_client(listener->port(), client_id, trust, "stage9");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(contains(client.status(), "'stage9' is not a node of the trust file"));
}

// ---- Deadlines, shutdown, wake fd ----

TEST(TlsTest, HandshakeWithASilentServerHitsItsDeadline) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  Identity client_id = make_identity(dir.path(), "client-node");
  TrustFile trust = fingerprint_trust({&server_id, &client_id});
  Result<Listener> listener = Listener::bind({"127.0.0.1", 0});  // accepts in the kernel, never answers
  ASSERT_TRUE(listener.ok());
  const auto start = Clock::now();
  Result<TlsChannel> client = connect_client(listener->port(), client_id, trust, "server-node", milliseconds(100));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().kind(), ErrorKind::kDisconnected);
  EXPECT_TRUE(contains(client.status(), "TLS handshake: timed out")) << client.status().message();
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
}

TEST(TlsTest, HandshakeWithASilentClientHitsItsDeadline) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  TrustFile trust = fingerprint_trust({&server_id});
  TestServer server(server_id, trust, milliseconds(100));
  Result<Socket> silent = Socket::connect({"127.0.0.1", server.port()}, deadline_after(milliseconds(2000)));
  ASSERT_TRUE(silent.ok());
  ASSERT_FALSE(server.result().ok());
  EXPECT_EQ(server.result().status().kind(), ErrorKind::kDisconnected);
  EXPECT_TRUE(contains(server.result().status(), "timed out")) << server.result().status().message();
}

// What the server records between server() and confirm() is there before the
// client's client() returns: the client waits for the confirmation, and a server
// that drops the channel instead refuses the client (fails if server() confirms
// by itself: the client returns before the record; checked).
TEST(TlsTest, ClientReturnsOnlyAfterTheServerConfirms) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  Identity client_id = make_identity(dir.path(), "client-node");
  TrustFile trust = fingerprint_trust({&server_id, &client_id});
  Result<Listener> listener = Listener::bind({"127.0.0.1", 0});
  ASSERT_TRUE(listener.ok());
  std::atomic<bool> recorded{false};
  std::thread server([&] {
    for (bool confirm : {true, false}) {
      const Deadline deadline = deadline_after(milliseconds(5000));
      Result<Socket> socket = listener->accept(deadline);
      ASSERT_TRUE(socket.ok());
      Result<TlsChannel> channel = TlsChannel::server(std::move(*socket), server_id, trust, deadline);
      ASSERT_TRUE(channel.ok()) << channel.status().to_string();
      std::this_thread::sleep_for(milliseconds(200));
      recorded = true;
      if (confirm) {
        EXPECT_TRUE(channel->confirm(deadline).ok());
      }
    }
  });
  Result<TlsChannel> accepted = connect_client(listener->port(), client_id, trust, "server-node");
  ASSERT_TRUE(accepted.ok()) << accepted.status().to_string();
  EXPECT_TRUE(recorded);
  recorded = false;
  Result<TlsChannel> dropped = connect_client(listener->port(), client_id, trust, "server-node");
  server.join();
  ASSERT_FALSE(dropped.ok());
  EXPECT_TRUE(contains(dropped.status(), "did not accept this node")) << dropped.status().message();
}

TEST(TlsTest, WakeFdInterruptsAServerHandshake) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  TrustFile trust = fingerprint_trust({&server_id});
  Result<Listener> listener = Listener::bind({"127.0.0.1", 0});
  ASSERT_TRUE(listener.ok());
  Result<Socket> silent = Socket::connect({"127.0.0.1", listener->port()}, deadline_after(milliseconds(2000)));
  ASSERT_TRUE(silent.ok());
  Result<Socket> accepted = listener->accept(deadline_after(milliseconds(2000)));
  ASSERT_TRUE(accepted.ok());
  WakeFd wake;
  std::thread waker([&] {
    std::this_thread::sleep_for(milliseconds(50));
    wake.signal();
  });
  const auto start = Clock::now();
  Result<TlsChannel> server =
      TlsChannel::server(std::move(*accepted), server_id, trust, deadline_after(milliseconds(5000)), wake.fd());
  waker.join();
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status(), "interrupted")) << server.status().message();
  EXPECT_TRUE(is_interrupted(server.status())) << server.status().to_string();  // through with_context
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
}

struct ChannelPair {
  std::optional<TlsChannel> client;
  std::optional<TlsChannel> server;
};

ChannelPair handshake_pair(const Identity& server_id, const Identity& client_id, const TrustFile& trust) {
  ChannelPair pair;
  TestServer server(server_id, trust);
  Result<TlsChannel> client = connect_client(server.port(), client_id, trust, server_id.name);
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  EXPECT_TRUE(server.result().ok()) << server.result().status().to_string();
  if (client.ok()) pair.client.emplace(std::move(client).value());
  if (server.result().ok()) pair.server.emplace(std::move(server.result()).value());
  return pair;
}

TEST(TlsTest, ShutdownAndWakeFdInterruptABlockedRead) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  Identity client_id = make_identity(dir.path(), "client-node");
  TrustFile trust = fingerprint_trust({&server_id, &client_id});
  ChannelPair pair = handshake_pair(server_id, client_id, trust);
  ASSERT_TRUE(pair.client && pair.server);

  WakeFd wake;
  std::thread signaller([&] {
    std::this_thread::sleep_for(milliseconds(50));
    wake.signal();
  });
  uint8_t byte = 0;
  Status interrupted = pair.client->read_exact({&byte, 1}, deadline_after(milliseconds(10000)), wake.fd());
  signaller.join();
  EXPECT_TRUE(is_interrupted(interrupted)) << interrupted.to_string();
  EXPECT_FALSE(is_closed_cleanly(interrupted));

  Status timed_out = pair.client->read_exact({&byte, 1}, deadline_after(milliseconds(50)));
  EXPECT_EQ(timed_out.kind(), ErrorKind::kDisconnected);
  EXPECT_TRUE(contains(timed_out, "timed out")) << timed_out.message();

  const auto start = Clock::now();
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    pair.server->shutdown();
  });
  Status closed = pair.server->read_exact({&byte, 1}, deadline_after(milliseconds(10000)));
  closer.join();
  EXPECT_EQ(closed.kind(), ErrorKind::kDisconnected);
  EXPECT_TRUE(contains(closed, "shut down")) << closed.message();
  EXPECT_FALSE(is_closed_cleanly(closed));  // this end's own shutdown is no peer's close
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
}

// One reader thread and one writer thread on each end, all four at once, with
// messages large enough to fill the socket buffers (the writers then wait in poll
// while the readers keep calling SSL_read).
TEST(TlsTest, ReaderAndWriterThreadsOnBothEnds) {
  TempDir dir;
  Identity server_id = make_identity(dir.path(), "server-node");
  Identity client_id = make_identity(dir.path(), "client-node");
  TrustFile trust = fingerprint_trust({&server_id, &client_id});
  ChannelPair pair = handshake_pair(server_id, client_id, trust);
  ASSERT_TRUE(pair.client && pair.server);

  constexpr uint32_t kMessages = 1000;
  auto message_size = [](uint32_t i) -> uint32_t { return i % 97 == 0 ? 200000 : (i * 131) % 3000; };
  auto fill = [](uint32_t i, std::vector<uint8_t>& bytes) {
    for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(i * 31 + k);
  };
  const Deadline deadline = deadline_after(milliseconds(60000));
  std::atomic<int> failures{0};
  auto writer = [&](TlsChannel& channel) {
    for (uint32_t i = 0; i < kMessages; ++i) {
      std::vector<uint8_t> body(message_size(i));
      fill(i, body);
      const uint32_t header[2] = {i, static_cast<uint32_t>(body.size())};
      if (!channel.write_all({reinterpret_cast<const uint8_t*>(header), sizeof header}, deadline).ok() ||
          !channel.write_all(body, deadline).ok()) {
        ++failures;
        return;
      }
    }
  };
  auto reader = [&](TlsChannel& channel) {
    for (uint32_t i = 0; i < kMessages; ++i) {
      uint32_t header[2] = {};
      if (!channel.read_exact({reinterpret_cast<uint8_t*>(header), sizeof header}, deadline).ok() || header[0] != i ||
          header[1] != message_size(i)) {
        ++failures;
        return;
      }
      std::vector<uint8_t> body(header[1]), expected(header[1]);
      fill(i, expected);
      if (!channel.read_exact(body, deadline).ok() || body != expected) {
        ++failures;
        return;
      }
    }
  };
  std::thread threads[] = {std::thread(writer, std::ref(*pair.client)), std::thread(reader, std::ref(*pair.client)),
                           std::thread(writer, std::ref(*pair.server)), std::thread(reader, std::ref(*pair.server))};
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

// ---- CA mode ----

using KeyPtr = std::shared_ptr<EVP_PKEY>;
using CertPtr = std::shared_ptr<X509>;

KeyPtr new_key() { return KeyPtr(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"), EVP_PKEY_free); }

void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  ASSERT_NE(ext, nullptr);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// issuer == nullptr: self-signed (a CA).
CertPtr make_cert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key) {
  static std::atomic<long> serial{1000};
  CertPtr cert(X509_new(), X509_free);
  X509_set_version(cert.get(), X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
  X509_NAME_add_entry_by_NID(X509_get_subject_name(cert.get()), NID_commonName, MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer ? issuer : cert.get()));
  X509_set_pubkey(cert.get(), key);
  if (issuer == nullptr) {
    add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE");
    add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_ext(cert.get(), issuer, NID_basic_constraints, "critical,CA:FALSE");
  }
  EXPECT_GT(X509_sign(cert.get(), issuer_key ? issuer_key : key, nullptr), 0);
  return cert;
}

void write_pem(const std::filesystem::path& path, EVP_PKEY* key, X509* cert) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  if (key) PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  if (cert) PEM_write_X509(f, cert);
  std::fclose(f);
}

struct TestCa {
  KeyPtr key = new_key();
  CertPtr cert;
  explicit TestCa(const std::string& name) : cert(make_cert(key.get(), name, nullptr, nullptr)) {}

  // An identity directory with a certificate for cn signed by this CA.
  Identity issue(const std::filesystem::path& dir, const std::string& cn) const {
    KeyPtr node_key = new_key();
    CertPtr node_cert = make_cert(node_key.get(), cn, cert.get(), key.get());
    std::filesystem::create_directories(dir);
    write_pem(dir / "key.pem", node_key.get(), nullptr);
    write_pem(dir / "cert.pem", nullptr, node_cert.get());
    Result<Identity> identity = load_identity(dir);
    EXPECT_TRUE(identity.ok()) << identity.status().to_string();
    return identity.ok() ? std::move(identity).value() : Identity{};
  }
};

TrustFile ca_trust(const std::filesystem::path& ca_file, const std::vector<std::string>& names) {
  TrustFile trust;
  trust.cluster = "test";
  trust.ca_file = ca_file;
  for (const std::string& name : names) trust.nodes.push_back({name, "127.0.0.1:1", ""});
  return trust;
}

class TlsCaTest : public ::testing::Test {
 protected:
  TempDir dir_;
  TestCa ca_{"cluster CA"};
  TestCa other_ca_{"cluster CA"};  // same name, different key
  std::filesystem::path ca_file_ = dir_.path() / "ca.pem";
  TrustFile trust_ = ca_trust(ca_file_, {"stage0", "stage1", "coordinator"});
  void SetUp() override { write_pem(ca_file_, nullptr, ca_.cert.get()); }
};

TEST_F(TlsCaTest, AcceptsCaSignedNodes) {
  Identity server_id = ca_.issue(dir_.path() / "s", "stage0");
  Identity client_id = ca_.issue(dir_.path() / "c", "coordinator");
  TestServer server(server_id, trust_);
  Result<TlsChannel> client = connect_client(server.port(), client_id, trust_, "stage0");
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  ASSERT_TRUE(server.result().ok()) << server.result().status().to_string();
  EXPECT_EQ(client->peer_name(), "stage0");
  EXPECT_EQ(server.result()->peer_name(), "coordinator");
}

// Fails without the chain check (!preverify_ok) in judge_peer.
TEST_F(TlsCaTest, RefusesACertificateFromAnotherCa) {
  Identity server_id = ca_.issue(dir_.path() / "s", "stage0");
  Identity forged = other_ca_.issue(dir_.path() / "c", "coordinator");
  TestServer server(server_id, trust_);
  Result<TlsChannel> client = connect_client(server.port(), forged, trust_, "stage0");
  EXPECT_FALSE(client.ok());
  ASSERT_FALSE(server.result().ok());
  EXPECT_EQ(server.result().status().kind(), ErrorKind::kInvalidInput) << server.result().status().to_string();
  EXPECT_TRUE(contains(server.result().status(), "does not verify against the CA " + ca_file_.string()))
      << server.result().status().message();

  // And a client refuses such a server.
  Identity client_id = ca_.issue(dir_.path() / "c2", "coordinator");
  Identity forged_server = other_ca_.issue(dir_.path() / "s2", "stage0");
  TestServer server2(forged_server, trust_);
  Result<TlsChannel> client2 = connect_client(server2.port(), client_id, trust_, "stage0");
  ASSERT_FALSE(client2.ok());
  EXPECT_EQ(client2.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(contains(client2.status(), "does not verify against the CA")) << client2.status().message();
}

// Fails without the CN check (find_name) in judge_peer.
TEST_F(TlsCaTest, RefusesACaSignedCertificateForAnUnknownName) {
  Identity server_id = ca_.issue(dir_.path() / "s", "stage0");
  Identity outsider = ca_.issue(dir_.path() / "c", "intruder");
  TestServer server(server_id, trust_);
  Result<TlsChannel> client = connect_client(server.port(), outsider, trust_, "stage0");
  EXPECT_FALSE(client.ok());
  ASSERT_FALSE(server.result().ok());
  EXPECT_EQ(server.result().status().kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(contains(server.result().status(), "for CN 'intruder' which is not a node of the trust file"))
      << server.result().status().message();
}

// Fails without the CN == expected_peer check in judge_peer (CA mode).
TEST_F(TlsCaTest, ClientRefusesAServerNamedDifferently) {
  Identity server_id = ca_.issue(dir_.path() / "s", "stage1");
  Identity client_id = ca_.issue(dir_.path() / "c", "coordinator");
  TestServer server(server_id, trust_);
  Result<TlsChannel> client = connect_client(server.port(), client_id, trust_, "stage0");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(contains(client.status(), "presented a certificate for node 'stage1', expected node 'stage0'"))
      << client.status().message();
  EXPECT_FALSE(server.result().ok());
}

// Fails without the pinned-fingerprint check in judge_peer (CA mode).
TEST_F(TlsCaTest, APinnedFingerprintMustMatchToo) {
  Identity server_id = ca_.issue(dir_.path() / "s", "stage0");
  Identity client_id = ca_.issue(dir_.path() / "c", "coordinator");
  Identity reissued = ca_.issue(dir_.path() / "c2", "coordinator");  // same CN, another key
  trust_.nodes[2].fingerprint = client_id.fingerprint;
  {
    TestServer server(server_id, trust_);
    Result<TlsChannel> client = connect_client(server.port(), client_id, trust_, "stage0");
    ASSERT_TRUE(client.ok()) << client.status().to_string();
    ASSERT_TRUE(server.result().ok());
  }
  TestServer server(server_id, trust_);
  Result<TlsChannel> client = connect_client(server.port(), reissued, trust_, "stage0");
  EXPECT_FALSE(client.ok());
  ASSERT_FALSE(server.result().ok());
  EXPECT_TRUE(contains(server.result().status(), "whose pinned fingerprint is " + client_id.fingerprint))
      << server.result().status().message();
}

TEST_F(TlsCaTest, AMissingCaFileIsNamed) {
  Identity server_id = ca_.issue(dir_.path() / "s", "stage0");
  Identity client_id = ca_.issue(dir_.path() / "c", "coordinator");
  TrustFile broken = ca_trust(dir_.path() / "absent.pem", {"stage0", "coordinator"});
  Result<Listener> listener = Listener::bind({"127.0.0.1", 0});
  ASSERT_TRUE(listener.ok());
  Result<TlsChannel> client = connect_client(listener->port(), client_id, broken, "stage0");
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(contains(client.status(), (dir_.path() / "absent.pem").string() + ": cannot load the cluster CA"))
      << client.status().message();
}

}  // namespace
}  // namespace tessera::net
