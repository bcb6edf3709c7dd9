// A `tessera stage` process under a flood from one authenticated peer, in a memory
// cgroup of weights + KV budget + 256 MiB: every allocation the peer can cause is
// bounded by a budget the stage states (issue 14, point 1).
//   - 10,000 requests of 3 tokens, never cancelled: the first 1024 (the stage's
//     --max-requests) are served, every later one gets an `overloaded` error
//     naming the cap;
//   - 400 full-context frames of hidden states (600 MiB), sent faster than the
//     stage computes: the stage's readers wait (back-pressure), so what waits
//     stays within StageOptions::max_queued_bytes;
//   - halfway through the flood, while the peer still sends, a second,
//     legitimate session (`tessera generate --pipeline`) takes the stage over
//     and is served with the output of one process;
//   - the stage is never killed and its peak RSS (VmHWM) stays within the budget.
// Also: input of the wrong kind for the stage's layers (token ids for a later
// stage, hidden states for the first) fails its request instead of the stage.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "model/fixtures.h"
#include "net/local_cluster.h"
#include "pipeline/coordinator.h"
#include "pipeline/frame_channel.h"
#include "pipeline/stage_service.h"
#include "support/run_tessera.h"
#include "support/sanitizers.h"
#include "wire/control_frame.h"
#include "wire/tensor_codec.h"

namespace tessera::pipeline {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using testing::ids_line;
namespace fs = std::filesystem;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kKvBudget = 24 * kMiB;  // --kv-memory
constexpr uint64_t kHeadroom = 256 * kMiB;

bool write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// A memory cgroup this test makes (v1 at /sys/fs/cgroup/memory, else v2), with
// swap kept out where the kernel allows; empty dir() if none can be made (why()
// says why).
class MemoryCgroup {
 public:
  explicit MemoryCgroup(uint64_t limit) {
    const std::string name = "tessera-stage-memory-" + std::to_string(::getpid());
    std::string reasons;
    if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
      const fs::path dir = fs::path("/sys/fs/cgroup/memory") / name;
      std::error_code error;
      if (fs::create_directory(dir, error) && write_file(dir / "memory.limit_in_bytes", std::to_string(limit))) {
        (void)write_file(dir / "memory.swappiness", "0");
        (void)write_file(dir / "memory.memsw.limit_in_bytes", std::to_string(limit));
        dir_ = dir;
        version_ = 1;
        return;
      }
      reasons += "cgroup v1: cannot make " + dir.string() + " (" + error.message() + "); ";
      fs::remove(dir, error);
    }
    for (const fs::path& root : {fs::path("/sys/fs/cgroup"), fs::path("/sys/fs/cgroup/unified")}) {
      if (!fs::exists(root / "cgroup.controllers")) continue;
      std::ifstream controllers(root / "cgroup.controllers");
      std::string all((std::istreambuf_iterator<char>(controllers)), std::istreambuf_iterator<char>());
      if (all.find("memory") == std::string::npos) {
        reasons += "cgroup v2 at " + root.string() + ": no memory controller; ";
        continue;
      }
      (void)write_file(root / "cgroup.subtree_control", "+memory");
      const fs::path dir = root / name;
      std::error_code error;
      if (fs::create_directory(dir, error) && write_file(dir / "memory.max", std::to_string(limit))) {
        (void)write_file(dir / "memory.swap.max", "0");
        dir_ = dir;
        version_ = 2;
        return;
      }
      reasons += "cgroup v2 at " + root.string() + ": cannot make " + dir.string() + " with memory.max (" +
                 error.message() + "); ";
      fs::remove(dir, error);
    }
    why_ = reasons.empty() ? "no cgroup v1 memory controller or cgroup v2 hierarchy here" : reasons;
  }
  ~MemoryCgroup() {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove(dir_, ignored);
  }
  const fs::path& dir() const { return dir_; }
  const std::string& why() const { return why_; }
  int version() const { return version_; }
  // The cgroup's own peak usage, in bytes (0 if the kernel does not keep it).
  uint64_t peak() const {
    std::ifstream in(dir_ / (version_ == 1 ? "memory.max_usage_in_bytes" : "memory.peak"));
    uint64_t bytes = 0;
    in >> bytes;
    return bytes;
  }

 private:
  fs::path dir_;
  std::string why_;
  int version_ = 0;
};

// A field of /proc/PID/status in bytes ("VmHWM"), 0 if absent.
uint64_t proc_status_bytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(field.size() + 1));
    uint64_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

bool alive(pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) == 0; }

uint64_t file_bytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors") bytes += fs::file_size(entry.path());
  return bytes;
}

Result<json> read_control(FrameChannel& channel) {
  TS_ASSIGN_OR_RETURN(wire::Frame frame,
                      channel.read_frame(wire::kControlOnly, net::deadline_after(milliseconds(30000))));
  return wire::decode_control(frame);
}

// The replies a peer reads on its own thread while it sends: a tensor frame
// (logits) is served, an `error` is counted by kind.
struct Replies {
  std::atomic<uint64_t> served{0}, overloaded{0}, other{0}, taken_over{0};
  std::string first_overloaded, first_other;  // reader thread, read after join
  uint64_t total() const { return served + overloaded + other; }
};

void read_replies(FrameChannel& channel, uint64_t expected, Replies& replies) {
  const wire::FrameLimits limits{wire::kMaxMessageHeaderBytes, 16 * kMiB, wire::kMaxControlBytes};
  while (replies.total() < expected) {
    Result<wire::Frame> frame = channel.read_frame(limits, net::deadline_after(milliseconds(60000)));
    if (!frame.ok()) {
      replies.first_other = replies.first_other.empty() ? frame.status().to_string() : replies.first_other;
      return;
    }
    if (frame->prefix.kind == wire::MessageKind::kTensor) {
      ++replies.served;
      continue;
    }
    Result<json> message = wire::decode_control(*frame);
    const std::string text = message.ok() ? message->value("message", message->dump()) : message.status().to_string();
    if (text.find("session taken over") != std::string::npos) {
      ++replies.taken_over;
      return;
    }
    const bool overloaded = message.ok() && wire::text_or(*message, "kind", "") == "overloaded";  // error_message
    if (overloaded && text.find("KV cache") == std::string::npos) {
      if (replies.first_overloaded.empty()) replies.first_overloaded = text;
      ++replies.overloaded;
    } else {
      if (replies.first_other.empty()) replies.first_other = text;
      ++replies.other;
    }
  }
}

class StageProcess {
 public:
  StageProcess() {
    dir_ = fs::path(::testing::TempDir()) / ("stage_memory_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    const uint16_t port = *net::free_loopback_port();
    address_ = "127.0.0.1:" + std::to_string(port);
    EXPECT_TRUE(net::write_local_cluster(dir_, {{"stage", address_},
                                                {"coordinator", "127.0.0.1:1"},
                                                {"previous", "127.0.0.1:2"},
                                                {"second", "127.0.0.1:3"}})
                    .ok());
    trust_ = *net::read_trust_file(dir_ / "trust.json");
  }
  ~StageProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }
  // Starts `tessera stage` with `flags`, in `cgroup` if one is given (joined
  // before exec, so every allocation of the process counts), and waits until it
  // answers a probe.
  void start(const std::vector<std::string>& flags, const fs::path& cgroup) {
    std::vector<std::string> argv = {TESSERA_BINARY, "stage",
                                     "--listen",     address_,
                                     "--identity",   (dir_ / "stage").string(),
                                     "--trust",      (dir_ / "trust.json").string()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const std::string log = log_path().string();
    pid_ = ::fork();
    if (pid_ == 0) {
      if (!cgroup.empty() && !write_file(cgroup / "cgroup.procs", std::to_string(::getpid()))) _exit(126);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> args;
      for (std::string& arg : argv) args.push_back(arg.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      _exit(127);
    }
    for (int i = 0; i < 200 && alive(pid_); ++i) {
      if (probe_stage(identity("coordinator"), trust_, "stage", milliseconds(1000)).ok()) return;
      std::this_thread::sleep_for(milliseconds(50));
    }
    ADD_FAILURE() << "the stage did not start:\n" << testing::slurp(log_path());
  }
  pid_t pid() const { return pid_; }
  fs::path dir() const { return dir_; }
  fs::path log_path() const { return dir_ / "stage.log"; }
  net::Identity identity(const std::string& name) const { return *net::load_identity(dir_ / name); }
  std::unique_ptr<FrameChannel> connect(const std::string& as) {
    Result<ConnectedChannel> connected =
        connect_frame_channel(identity(as), trust_, "stage", net::deadline_after(milliseconds(10000)));
    EXPECT_TRUE(connected.ok()) << connected.status().to_string();
    return connected.ok() ? std::move(connected->channel) : nullptr;
  }
  // A coordinator's setup of layers [begin, end) of `model` (the last stage);
  // the channel, once the stage is ready.
  std::unique_ptr<FrameChannel> setup(const std::string& model, int64_t begin, int64_t end, uint64_t session,
                                      int64_t context) {
    auto channel = connect("coordinator");
    if (!channel) return nullptr;
    const Status sent = channel->write_frame(wire::encode_control(0, {{"type", "setup"},
                                                                      {"model", model},
                                                                      {"begin", begin},
                                                                      {"end", end},
                                                                      {"next", ""},
                                                                      {"session", session},
                                                                      {"context", context}}),
                                             net::deadline_after(milliseconds(10000)));
    Result<json> ready = sent.ok() ? read_control(*channel) : Result<json>(sent);
    if (!ready.ok() || (*ready)["type"] != "ready") {
      ADD_FAILURE() << "setup: " << (ready.ok() ? ready->dump() : ready.status().to_string()) << "\n"
                    << testing::slurp(log_path());
      return nullptr;
    }
    return channel;
  }

 private:
  fs::path dir_;
  std::string address_;
  net::TrustFile trust_;
  pid_t pid_ = -1;
};

// Fails against the unbounded code (checked): with the cap raised
// (--max-requests 100000) 1536 requests are served and the rest are refused only
// when the KV pool is full, not naming the cap; with push's bound removed (the
// queue unbounded) the hidden-state flood grows the stage past the budget and
// the cgroup kills it at about the 190th to 200th frame (300 MiB of anonymous
// memory).
TEST(StageMemory, TenThousandRequestsAndAFloodFromOnePeerStayWithinTheStagesBudgetAndASecondSessionIsServed) {
  const std::string tiny = testing::fixture_dir(testing::kShippedModel);
  const std::string small = testing::fixture_dir("llama3_f32");
  const uint64_t weights = std::max(file_bytes(tiny), file_bytes(small));
  const uint64_t bound = weights + kKvBudget + kHeadroom + testing::kSanitizerMemory;
  MemoryCgroup cgroup(bound);
  if (cgroup.dir().empty()) GTEST_SKIP() << "no memory cgroup can be made here: " << cgroup.why();

  StageProcess stage;
  stage.start({"--threads", "1", "--kv-memory", std::to_string(kKvBudget)}, cgroup.dir());
  ASSERT_TRUE(alive(stage.pid()));
  const auto started = std::chrono::steady_clock::now();

  // 10,000 requests of 3 tokens from the coordinator, pipelined; replies are read
  // on another thread, as a coordinator does.
  constexpr uint64_t kRequests = 10000, kCap = 1024;
  auto coordinator = stage.setup(small, 0, 2, 1001, 64);
  ASSERT_TRUE(coordinator);
  Replies replies;
  std::thread reader([&] { read_replies(*coordinator, kRequests, replies); });
  for (uint64_t request = 1; request <= kRequests; ++request) {
    const int32_t ids[] = {static_cast<int32_t>(request % 500), 7, 9};
    const uint64_t shape[] = {3};
    const Status sent =
        coordinator->write_frame(wire::encode_tensor_frame(request, wire::Encoding{DType::kI32}, shape,
                                                           {reinterpret_cast<const uint8_t*>(ids), sizeof ids}),
                                 net::deadline_after(milliseconds(60000)));
    if (!sent.ok()) {
      ADD_FAILURE() << "request " << request << ": " << sent.to_string();
      break;
    }
  }
  reader.join();
  EXPECT_EQ(replies.served, kCap) << replies.first_other;
  EXPECT_EQ(replies.overloaded, kRequests - kCap) << replies.first_other;
  EXPECT_EQ(replies.other, 0u) << replies.first_other;
  EXPECT_NE(replies.first_overloaded.find("1024 requests open (the stage's limit, --max-requests 1024)"),
            std::string::npos)
      << replies.first_overloaded;
  ASSERT_TRUE(alive(stage.pid())) << testing::slurp(stage.log_path());
  const double requests_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // A flood of full-context hidden states from a trusted previous stage: 400
  // requests of [1024, 384] f32 (1.5 MiB each), far faster than the stage
  // computes them. The first few fill the KV budget; the rest are refused as
  // overloaded (the KV cache is full) once they reach the scheduler.
  constexpr uint64_t kFloodRequests = 400, kContext = 1024, kHidden = 384;
  auto flood_coordinator = stage.setup(tiny, 1, 4, 1002, static_cast<int64_t>(kContext));
  ASSERT_TRUE(flood_coordinator);
  Replies flood;
  std::thread flood_reader([&] { read_replies(*flood_coordinator, kFloodRequests, flood); });
  auto previous = stage.connect("previous");
  ASSERT_TRUE(previous);
  ASSERT_TRUE(previous
                  ->write_frame(wire::encode_control(0, {{"type", "upstream"}, {"session", 1002}}),
                                net::deadline_after(milliseconds(10000)))
                  .ok());
  std::vector<float> rows(kContext * kHidden);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
  const uint64_t shape[] = {kContext, kHidden};
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(rows.data()), rows.size() * sizeof(float));
  std::atomic<bool> flooded{false};
  std::string flood_error;  // writer thread, read after join
  std::thread writer([&] {
    for (uint64_t request = 1; request <= kFloodRequests && flood_error.empty(); ++request) {
      const Status sent =
          previous->write_frame(wire::encode_tensor_frame(request, wire::Encoding{DType::kF32}, shape, bytes),
                                net::deadline_after(milliseconds(60000)));
      if (!sent.ok()) flood_error = "flood frame " + std::to_string(request) + ": " + sent.to_string();
    }
    flooded = true;
  });

  // Halfway through the flood, while the peer still sends, a second, legitimate
  // session: a coordinator's run through the stage gives one process's tokens.
  // Its setup queues at once behind what waits and takes the session over; the
  // flood's remaining frames are dropped as they arrive.
  for (int i = 0; i < 6000 && flood.total() < kFloodRequests / 2 && !flooded && alive(stage.pid()); ++i)
    std::this_thread::sleep_for(milliseconds(10));
  const double flood_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() - requests_s;
  const uint64_t flood_replies = flood.total();
  const fs::path plan = stage.dir() / "plan.json";
  const json stages = json::array({json{{"name", "stage"}, {"model", tiny}, {"layers", {0, 4}}}});
  std::ofstream(plan) << json{{"stages", stages}}.dump();
  const auto run = testing::run_tessera("generate --model " + tiny + " --prompt-ids 5,6,7 -n 6 --pipeline " +
                                        plan.string() + " --identity " + (stage.dir() / "second").string() +
                                        " --trust " + (stage.dir() / "trust.json").string());
  writer.join();
  flood_reader.join();
  EXPECT_TRUE(flood_error.empty()) << flood_error << "\n"
                                   << (alive(stage.pid()) ? "" : "the stage died\n")
                                   << testing::slurp(stage.log_path());
  // Sanitized, the first full-context requests take the whole wait: a few replies show the flood reached the stage.
  EXPECT_GE(flood_replies, testing::kSanitized ? 1 : kFloodRequests / 2) << flood.first_other;
  EXPECT_GT(flood.served, 0u);
  EXPECT_TRUE(flood.taken_over == 1 || flood.total() == kFloodRequests) << flood.first_other;
  const auto local = testing::run_tessera("generate --model " + tiny + " --prompt-ids 5,6,7 -n 6 --threads 1");
  ASSERT_EQ(local.exit_code, 0) << local.err;
  EXPECT_EQ(run.exit_code, 0) << run.err << testing::slurp(stage.log_path());
  EXPECT_FALSE(ids_line(local.out).empty());
  EXPECT_EQ(ids_line(run.out), ids_line(local.out));

  ASSERT_TRUE(alive(stage.pid())) << "the stage was killed\n" << testing::slurp(stage.log_path());
  const uint64_t hwm = proc_status_bytes(stage.pid(), "VmHWM");
  std::printf(
      "peak RSS (VmHWM) %.1f MiB, cgroup v%d peak %.1f MiB, bound %.1f MiB (weights %.1f + KV %.1f + 256); "
      "10,000 requests %.1f s, half the flood %.1f s (%llu replies, then the second session%s)\n",
      static_cast<double>(hwm) / kMiB, cgroup.version(), static_cast<double>(cgroup.peak()) / kMiB,
      static_cast<double>(bound) / kMiB, static_cast<double>(weights) / kMiB, static_cast<double>(kKvBudget) / kMiB,
      requests_s, flood_s, static_cast<unsigned long long>(flood_replies),
      flood.taken_over ? " took it over" : " came after it");
  EXPECT_GT(hwm, 0u);
  EXPECT_LT(hwm, bound);
}

// stop() while a connection's reader waits for room (the bound is 2 items here)
// behind long prefills: the waiting reader gives up, the inference thread ends
// after its current step, and the service is gone at once. (Without push's stop
// check the reader waits for room forever and the service's destructor never
// returns: checked.)
TEST(StageMemory, StopEndsAReaderWaitingForRoom) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("stage_memory_stop_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const uint16_t port = *net::free_loopback_port();
  ASSERT_TRUE(
      net::write_local_cluster(dir, {{"stage", "127.0.0.1:" + std::to_string(port)}, {"coordinator", "127.0.0.1:1"}})
          .ok());
  const net::TrustFile trust = *net::read_trust_file(dir / "trust.json");
  StageOptions options;
  options.listen = *net::parse_endpoint("127.0.0.1:" + std::to_string(port));
  options.identity = *net::load_identity(dir / "stage");
  options.trust = trust;
  options.engine.threads = 1;
  options.engine.forward.kv_memory = 32 * kMiB;
  options.max_queued_work = 2;
  auto service = std::make_unique<StageService>(std::move(options));
  ASSERT_TRUE(service->bind().ok());
  std::thread run([&] { (void)service->run(); });

  const std::string tiny = testing::fixture_dir(testing::kShippedModel);
  auto connected = connect_frame_channel(*net::load_identity(dir / "coordinator"), trust, "stage",
                                         net::deadline_after(milliseconds(10000)));
  ASSERT_TRUE(connected.ok()) << connected.status().to_string();
  FrameChannel& coordinator = *connected->channel;
  ASSERT_TRUE(coordinator
                  .write_frame(wire::encode_control(0, {{"type", "setup"},
                                                        {"model", tiny},
                                                        {"begin", 0},
                                                        {"end", 4},
                                                        {"next", ""},
                                                        {"session", 3001},
                                                        {"context", 2048}}),
                               net::deadline_after(milliseconds(10000)))
                  .ok());
  Result<json> ready = read_control(coordinator);
  ASSERT_TRUE(ready.ok() && (*ready)["type"] == "ready") << (ready.ok() ? ready->dump() : ready.status().to_string());
  // Prompts of 2048 tokens, each four steps of 512: the reader soon waits for room.
  std::atomic<bool> sending{true};
  std::thread writer([&] {
    std::vector<int32_t> ids(2048);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(1 + i * 7 % 8000);
    const uint64_t shape[] = {ids.size()};
    for (uint64_t request = 1; request <= 20 && sending; ++request) {
      const Status sent = coordinator.write_frame(
          wire::encode_tensor_frame(request, wire::Encoding{DType::kI32}, shape,
                                    {reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * sizeof(int32_t)}),
          net::deadline_after(milliseconds(500)));
      if (!sent.ok()) return;
    }
  });
  std::this_thread::sleep_for(milliseconds(1500));
  const auto stopping = std::chrono::steady_clock::now();
  service->stop();
  run.join();
  service.reset();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopping).count();
  sending = false;
  writer.join();
  std::printf("stopped in %.2f s\n", seconds);
  EXPECT_LT(seconds, 10.0);
  fs::remove_all(dir);
}

// Token ids for a stage that takes hidden states, or hidden states for the first
// stage, fail that request as invalid input; the stage serves the next one.
// (Without the check in State::feed the scheduler's invariant check aborts the
// stage at the first such frame: checked.)
TEST(StageMemory, InputOfTheWrongKindForTheStagesLayersFailsItsRequestOnly) {
  StageProcess stage;
  stage.start({"--threads", "1", "--kv-memory", "8MiB"}, {});
  const std::string small = testing::fixture_dir("llama3_f32");
  const int32_t ids[] = {1, 2, 3};
  const uint64_t id_shape[] = {3};
  const auto id_frame = [&](uint64_t request) {
    return wire::encode_tensor_frame(request, wire::Encoding{DType::kI32}, id_shape,
                                     {reinterpret_cast<const uint8_t*>(ids), sizeof ids});
  };
  const std::vector<float> rows(2 * 64, 0.25f);
  const uint64_t hidden_shape[] = {2, 64};
  const auto hidden_frame = [&](uint64_t request) {
    return wire::encode_tensor_frame(request, wire::Encoding{DType::kF32}, hidden_shape,
                                     {reinterpret_cast<const uint8_t*>(rows.data()), rows.size() * sizeof(float)});
  };
  const auto deadline = [] { return net::deadline_after(milliseconds(10000)); };
  const wire::FrameLimits limits{wire::kMaxMessageHeaderBytes, 16 * kMiB, wire::kMaxControlBytes};
  struct Case {
    int64_t begin;
    bool ids_from_coordinator;  // else hidden states from a previous stage
    std::string refusal;
  };
  uint64_t session = 2000;
  for (const Case& c : {Case{1, true, "token ids for layers [1, 2), which take hidden states"},
                        Case{0, false, "hidden states for layers [0, 2), which take token ids"}}) {
    auto coordinator = stage.setup(small, c.begin, 2, ++session, 16);
    ASSERT_TRUE(coordinator);
    auto previous = stage.connect("previous");  // a trusted previous stage of the session
    ASSERT_TRUE(previous);
    ASSERT_TRUE(
        previous->write_frame(wire::encode_control(0, {{"type", "upstream"}, {"session", session}}), deadline()).ok());
    FrameChannel& wrong = c.ids_from_coordinator ? *coordinator : *previous;
    ASSERT_TRUE(wrong.write_frame(c.ids_from_coordinator ? id_frame(1) : hidden_frame(1), deadline()).ok());
    Result<json> refused = read_control(*coordinator);
    ASSERT_TRUE(refused.ok()) << refused.status().to_string() << "\n" << testing::slurp(stage.log_path());
    EXPECT_EQ((*refused)["type"], "error");
    EXPECT_NE((*refused)["message"].get<std::string>().find(c.refusal), std::string::npos) << refused->dump();
    // The stage serves the right kind of input next.
    FrameChannel& right = c.ids_from_coordinator ? *previous : *coordinator;
    ASSERT_TRUE(right.write_frame(c.ids_from_coordinator ? hidden_frame(2) : id_frame(2), deadline()).ok());
    Result<wire::Frame> logits = coordinator->read_frame(limits, deadline());
    ASSERT_TRUE(logits.ok()) << logits.status().to_string() << "\n" << testing::slurp(stage.log_path());
    EXPECT_EQ(logits->prefix.kind, wire::MessageKind::kTensor);
    EXPECT_EQ(logits->prefix.request_id, 2u);
  }
  EXPECT_TRUE(alive(stage.pid()));
}

}  // namespace
}  // namespace tessera::pipeline
