// Tests of the trust file parser: valid files in both modes, and one case per
// validation, each checking that the error names the field. Every validation was
// checked by removing it from trust.cpp: the case that covers it then fails.
#include "net/trust.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <fstream>
#include <string>

namespace tessera::net {
namespace {

const std::string kFp0 = "sha256:" + std::string(64, 'a');
const std::string kFp1 = "sha256:" + std::string(64, 'b');
const std::string kFp2 = "sha256:" + std::string(63, 'c') + "d";

std::string node(const std::string& name, const std::string& address, const std::string& fingerprint) {
  return R"({"name": ")" + name + R"(", "address": ")" + address + R"(", "fingerprint": ")" + fingerprint + R"("})";
}

std::string three_nodes() {
  return "[" + node("stage0", "10.0.0.1:7100", kFp0) + "," + node("stage1", "10.0.0.2:7100", kFp1) + "," +
         node("stage2", "host.example:7100", kFp2) + "]";
}

TEST(TrustFileTest, ParsesFingerprintMode) {
  Result<TrustFile> trust = parse_trust_file(R"({"cluster": "demo", "nodes": )" + three_nodes() + "}", "/etc/t");
  ASSERT_TRUE(trust.ok()) << trust.status().to_string();
  EXPECT_EQ(trust->cluster, "demo");
  EXPECT_FALSE(trust->ca_mode());
  ASSERT_EQ(trust->nodes.size(), 3u);
  EXPECT_EQ(trust->nodes[2].address, "host.example:7100");
  ASSERT_NE(trust->find_name("stage1"), nullptr);
  EXPECT_EQ(trust->find_name("stage1")->fingerprint, kFp1);
  EXPECT_EQ(trust->find_name("stage9"), nullptr);
  ASSERT_NE(trust->find_fingerprint(kFp2), nullptr);
  EXPECT_EQ(trust->find_fingerprint(kFp2)->name, "stage2");
  EXPECT_EQ(trust->find_fingerprint(""), nullptr);
}

TEST(TrustFileTest, AllowsComments) {
  Result<TrustFile> trust = parse_trust_file(
      "// cluster demo\n{\"cluster\": \"demo\", /* two nodes */ \"nodes\": " + three_nodes() + "}", "");
  ASSERT_TRUE(trust.ok()) << trust.status().to_string();
  EXPECT_EQ(trust->nodes.size(), 3u);
}

TEST(TrustFileTest, NormalizesUppercaseFingerprints) {
  const std::string upper = "sha256:" + std::string(64, 'A');
  Result<TrustFile> trust = parse_trust_file(R"({"cluster": "demo", "nodes": [)" + node("a", "h:1", upper) + "]}", "");
  ASSERT_TRUE(trust.ok()) << trust.status().to_string();
  EXPECT_EQ(trust->nodes[0].fingerprint, kFp0);
}

TEST(TrustFileTest, CaModeResolvesTheCaAndMakesFingerprintsOptional) {
  Result<TrustFile> trust =
      parse_trust_file(R"({"cluster": "demo", "ca": "ca.pem", "nodes": [{"name": "a", "address": "h:1"},)" +
                           node("b", "h:2", kFp1) + "]}",
                       "/etc/tessera");
  ASSERT_TRUE(trust.ok()) << trust.status().to_string();
  EXPECT_TRUE(trust->ca_mode());
  EXPECT_EQ(trust->ca_file, std::filesystem::path("/etc/tessera/ca.pem"));
  EXPECT_EQ(trust->nodes[0].fingerprint, "");
  EXPECT_EQ(trust->nodes[1].fingerprint, kFp1);

  Result<TrustFile> absolute =
      parse_trust_file(R"({"cluster": "demo", "ca": "/pki/ca.pem", "nodes": [{"name": "a", "address": "h:1"}]})", "/x");
  ASSERT_TRUE(absolute.ok());
  EXPECT_EQ(absolute->ca_file, std::filesystem::path("/pki/ca.pem"));
}

struct BadCase {
  std::string json;
  std::string error;  // the whole message
};

// Each case differs from a valid file in one way.
std::vector<BadCase> bad_cases() {
  const std::string n0 = node("stage0", "10.0.0.1:7100", kFp0);
  const std::string n1 = node("stage1", "10.0.0.2:7100", kFp1);
  const std::string head = R"({"cluster": "demo", "nodes": [)" + n0 + "," + n1 + ",";
  const std::string fp_error = R"(nodes[2].fingerprint: expected "sha256:" and 64 hex digits)";
  return {
      {"{", ""},  // prefix only: the parser's message follows
      {"[1]", "expected a JSON object at the top level"},
      {R"({"cluster": "demo", "nodes": [)" + n0 + R"(], "cas": "ca.pem"})",
       "cas: unknown key (allowed: cluster, ca, nodes)"},
      {R"({"cluster": "demo", "cluster": "other", "nodes": [)" + n0 + "]}", "cluster: key appears twice in one object"},
      {R"({"nodes": [)" + n0 + "]}", "cluster: missing"},
      {R"({"cluster": "", "nodes": [)" + n0 + "]}", "cluster: expected a non-empty string"},
      {R"({"cluster": 7, "nodes": [)" + n0 + "]}", "cluster: expected a non-empty string"},
      {R"({"cluster": "demo", "ca": "", "nodes": [)" + n0 + "]}", "ca: expected a non-empty string"},
      {R"({"cluster": "demo"})", "nodes: missing"},
      {R"({"cluster": "demo", "nodes": []})", "nodes: expected a non-empty array"},
      {R"({"cluster": "demo", "nodes": {"name": "a"}})", "nodes: expected a non-empty array"},
      {head + "7]}", "nodes[2]: expected an object"},
      {head + R"({"name": "s2", "adress": "h:1", "fingerprint": ")" + kFp2 + R"("}]})",
       "nodes[2].adress: unknown key (allowed: name, address, fingerprint)"},
      {head + R"({"address": "h:1", "fingerprint": ")" + kFp2 + R"("}]})", "nodes[2].name: missing"},
      {head + node("", "h:1", kFp2) + "]}", "nodes[2].name: expected a non-empty string"},
      {head + node(std::string(65, 'n'), "h:1", kFp2) + "]}", "nodes[2].name: longer than 64 bytes (a certificate CN)"},
      {head + node("stage0", "h:1", kFp2) + "]}", "nodes[2].name: 'stage0' is also nodes[0].name"},
      {head + R"({"name": "s2", "fingerprint": ")" + kFp2 + R"("}]})", "nodes[2].address: missing"},
      {head + node("s2", "no-port", kFp2) + "]}", "nodes[2].address: address 'no-port': expected host:port"},
      {head + node("s2", "h:99999", kFp2) + "]}", "nodes[2].address: address 'h:99999': port must be 0..65535"},
      {head + R"({"name": "s2", "address": "h:1"}]})",
       R"(nodes[2].fingerprint: missing (required when the trust file names no "ca"))"},
      {head + node("s2", "h:1", std::string(64, 'c')) + "]}", fp_error},
      {head + node("s2", "h:1", "sha1:" + std::string(64, 'c')) + "]}", fp_error},
      {head + node("s2", "h:1", "sha256:" + std::string(63, 'c')) + "]}", fp_error},
      {head + node("s2", "h:1", "sha256:" + std::string(65, 'c')) + "]}", fp_error},
      {head + node("s2", "h:1", "sha256:" + std::string(63, 'c') + "g") + "]}", fp_error},
      {head + R"({"name": "s2", "address": "h:1", "fingerprint": 5}]})", fp_error},
      {head + node("s2", "h:1", kFp1) + "]}", "nodes[2].fingerprint: same as nodes[1].fingerprint"},
      {head + node("s2", "h:1", "sha256:" + std::string(64, 'B')) + "]}",
       "nodes[2].fingerprint: same as nodes[1].fingerprint"},
      {R"({"cluster": "demo", "ca": "ca.pem", "nodes": [{"name": "a", "address": "h:1"},)" +
           node("b", "h:2", "sha256:xyz") + "]}",
       R"(nodes[1].fingerprint: expected "sha256:" and 64 hex digits)"},
      {R"({"cluster": "demo", "ca": "ca.pem", "nodes": [{"name": "a", "address": "h:1", "fingerprint": "x", "fingerprint": ")" +
           kFp0 + R"("}]})",
       "fingerprint: key appears twice in one object"},
  };
}

TEST(TrustFileTest, RefusesEachInvalidFieldAndNamesIt) {
  for (const BadCase& bad : bad_cases()) {
    Result<TrustFile> trust = parse_trust_file(bad.json, "/etc/t");
    ASSERT_FALSE(trust.ok()) << "accepted: " << bad.json;
    EXPECT_EQ(trust.status().kind(), ErrorKind::kInvalidInput) << bad.json;
    if (bad.error.empty()) {
      EXPECT_EQ(trust.status().message().rfind("trust file: not valid JSON: ", 0), 0u) << trust.status().message();
    } else {
      EXPECT_EQ(trust.status().message(), bad.error) << bad.json;
    }
  }
}

TEST(TrustFileTest, ReadsAFileAndNamesItInErrors) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("trust_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "trust.json";
  {
    std::ofstream out(path);
    out << R"({"cluster": "demo", "ca": "ca.pem", "nodes": [{"name": "a", "address": "h:1"}]})";
  }
  Result<TrustFile> trust = read_trust_file(path);
  ASSERT_TRUE(trust.ok()) << trust.status().to_string();
  EXPECT_EQ(trust->ca_file, dir / "ca.pem");

  {
    std::ofstream out(path, std::ios::trunc);
    out << R"({"cluster": "demo", "nodes": [{"name": "a", "address": "h:1"}]})";
  }
  Result<TrustFile> bad = read_trust_file(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            path.string() + R"(: nodes[0].fingerprint: missing (required when the trust file names no "ca"))");

  Result<TrustFile> missing = read_trust_file(dir / "absent.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(missing.status().message().find("absent.json"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::net
