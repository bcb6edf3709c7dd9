// Runs the `tessera` binary as a user would, for CLI tests: captures the exit
// code, stdout and stderr, and checks clean refusals (exit code 2, one line on
// stderr naming what was wrong). Output goes to files named after the running
// test, since ctest runs the tests of one binary in parallel processes.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline CommandResult run_tessera(const std::string& args) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(test->test_suite_name()) + "." + test->name();
  const std::filesystem::path dir(::testing::TempDir());
  const auto out = dir / ("tessera_" + name + "_out.txt"), err = dir / ("tessera_" + name + "_err.txt");
  const std::string command = std::string(TESSERA_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(command.c_str());
  CommandResult run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = slurp(out);
  run.err = slurp(err);
  return run;
}

// The ids `tessera generate --prompt-ids` printed: the one line of digits and commas.
inline std::string ids_line(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.find_first_not_of("0123456789,") == std::string::npos) return line;
  }
  return "";
}

// Asserts a clean refusal: exit code 2, exactly one line on stderr holding every `needle`.
inline void expect_refused(const CommandResult& run, const std::vector<std::string>& needles) {
  EXPECT_EQ(run.exit_code, 2) << run.err;
  ASSERT_FALSE(run.err.empty());
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << "more than one line: " << run.err;
  for (const auto& needle : needles) EXPECT_NE(run.err.find(needle), std::string::npos) << run.err;
}

}  // namespace tessera::testing
