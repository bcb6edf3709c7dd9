// One rank of a group test: a separate process, as on a real cluster. The driver
// (group_process_test.cpp) starts one per rank (each in its own network namespace
// where it can), and reads the JSON lines this writes to --out.
//
//   collectives  every collective x dtype x size; each result checked against the
//                fixed-order sum computed locally, and its SHA-256 reported so the
//                driver can compare ranks, and sealed runs with plain runs
//   tamper       the tamper cases of scenarios.h, one per generation: rank 0
//                corrupts its pieces to rank 1; every rank reports the error it
//                raised and when, rebuilds, and checks a clean all_sum
#include <openssl/evp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "collective/scenarios.h"
#include "collective/tcp/tcp_group.h"

namespace {

using namespace tessera;
using namespace tessera::collective;
using namespace tessera::collective::test;
using nlohmann::json;

std::string sha256(std::span<const uint8_t> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    char pair[3];
    std::snprintf(pair, sizeof pair, "%02x", digest[i]);
    hex += pair;
  }
  return hex;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void collectives(Group& group, bool quick, std::ostream& out) {
  std::vector<uint64_t> sizes = {1, 3, 1000, 65535, 65536, 65537};
  if (quick) sizes = {1, 65537};
  const uint64_t big = (uint64_t{16} << 20) + 1;  // f32: 64 MiB + 4 bytes = 257 pieces of 256 KiB
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (Collective collective : kCollectives) {
      std::vector<uint64_t> these = sizes;
      const bool one_buffer = collective != Collective::kReduceScatter && collective != Collective::kAllGather;
      if (!quick && one_buffer && dtype == DType::kF32) these.push_back(big);
      for (uint64_t elements : these) {
        Result<std::vector<uint8_t>> result = run(group, collective, elements, dtype);
        json line = {{"collective", collective_name(collective)}, {"dtype", dtype_name(dtype)}, {"elements", elements}};
        if (!result.ok()) {
          line["error"] = result.status().to_string();
          line["ok"] = false;
        } else {
          line["digest"] = sha256(*result);
          line["ok"] = *result == expected(group.rank(), group.size(), collective, elements, dtype);
        }
        out << line.dump() << std::endl;
      }
    }
  }
}

// Runs the case's collective until it fails (the tamper hits within the first
// 201 messages of link 0 -> 1); ranks a send/recv leaves out wait for the abort.
Status run_until_failure(Group& group, const TamperCase& c, int* iterations) {
  const uint64_t elements = tamper_elements(c.collective, group.size());
  const bool takes_part = c.collective != Collective::kSendRecv || group.rank() <= 1;
  // 400: traffic continues past message 200, so a dropped or cut piece is
  // found by the next piece's header rather than by a timeout.
  for (*iterations = 0; takes_part && *iterations < 400; ++*iterations) {
    Result<std::vector<uint8_t>> result = run(group, c.collective, elements, DType::kF32);
    if (!result.ok()) return result.status();
  }
  // A sender can run ahead of the receiver that finds the bad piece (socket
  // buffers hold many messages), and some ranks take no part: wait for the abort.
  for (int waited_us = 0; waited_us < 5'000'000; waited_us += 100) {
    if (!group.failure().ok()) return group.failure();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return Status::internal("no error after " + std::to_string(*iterations) + " iterations and 5 s");
}

bool clean_all_sum(Group& group) {
  Result<std::vector<uint8_t>> result = run(group, Collective::kAllSum, 1000, DType::kF32);
  return result.ok() && *result == expected(group.rank(), group.size(), Collective::kAllSum, 1000, DType::kF32);
}

void tamper(Group& group, const std::vector<TamperCase>& cases, std::ostream& out) {
  out << json{{"clean", clean_all_sum(group)}, {"generation", group.generation()}}.dump() << std::endl;
  for (const TamperCase& c : cases) {
    json line = {{"case", tamper_name(c.tamper)}, {"collective", collective_name(c.collective)}, {"expect", c.expect}};
    Status rebuilt = group.rebuild();  // into the case's generation
    line["generation"] = group.generation();
    if (!rebuilt.ok() || group.generation() != c.tamper.generation) {
      line["error"] = "rebuild: " + rebuilt.to_string();
      out << line.dump() << std::endl;
      return;
    }
    int iterations = 0;
    const Status status = run_until_failure(group, c, &iterations);
    line["raised_ns"] = now_ns();
    line["iterations"] = iterations;
    line["error"] = status.message();
    Status recovered = group.rebuild();
    line["recovered"] = recovered.ok() && clean_all_sum(group);
    out << line.dump() << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"one rank of a tessera group test"};
  std::string identity_dir, trust_path, members, scenario, out_path;
  bool plain = false, quick = false;
  app.add_option("--identity", identity_dir)->required();
  app.add_option("--trust", trust_path)->required();
  app.add_option("--members", members)->required();
  app.add_option("--scenario", scenario)->required()->check(CLI::IsMember({"collectives", "tamper"}));
  app.add_option("--out", out_path)->required();
  app.add_flag("--plain", plain);
  app.add_flag("--quick", quick);
  CLI11_PARSE(app, argc, argv);

  std::ofstream out(out_path);
  auto fail = [&](const Status& status) {
    out << json{{"fatal", status.to_string()}}.dump() << std::endl;
    return 1;
  };
  Result<net::Identity> identity = net::load_identity(identity_dir);
  if (!identity.ok()) return fail(identity.status());
  Result<net::TrustFile> trust = net::read_trust_file(trust_path);
  if (!trust.ok()) return fail(trust.status());

  GroupOptions options;
  for (size_t start = 0; start <= members.size();) {
    size_t comma = std::min(members.find(',', start), members.size());
    options.members.push_back(members.substr(start, comma - start));
    start = comma + 1;
  }
  options.plain = plain;
  std::vector<TamperCase> cases;
  if (scenario == "tamper") {
    cases = tamper_cases(quick);
    options.piece_bytes = kTamperPieceBytes;
    options.progress_timeout = std::chrono::milliseconds(5000);
    if (options.members[0] == identity->name) {
      for (const TamperCase& c : cases) options.tampers.push_back(c.tamper);
    }
  }
  Result<Group> group = connect_group(*identity, *trust, options);
  if (!group.ok()) return fail(group.status());
  if (scenario == "collectives") collectives(*group, quick, out);
  if (scenario == "tamper") tamper(*group, cases, out);
  out << json{{"done", true}}.dump() << std::endl;
  return 0;
}
