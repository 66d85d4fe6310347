// Shared pieces of the `saturate` command: exit codes, Status reporting,
// size parsing and the terminal progress bar. The CLI is a thin layer over
// the libraries: it parses flags, calls one library function, prints.
#ifndef SATURATE_TOOLS_SATURATE_CLI_H_
#define SATURATE_TOOLS_SATURATE_CLI_H_

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "saturate/base/status.h"

namespace saturate::cli {

// Exit codes (documented in README.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitProblems = 1,  // the command ran and found problems (verify)
  kExitUsage = 2,     // bad flags or bad input (invalid argument, not found, exists)
  kExitCorrupt = 3,   // stored data failed a check
  kExitIO = 4,        // the operating system refused
  kExitInternal = 5,  // a bug, or unimplemented
  kExitCancelled = 130,
};

// Prints "saturate <command>: <message>" to stderr and returns the exit code
// for `status`'s code. The one place a Status becomes an exit code.
int ReportError(std::string_view command, const Status& status);

// "256MiB", "1G", "4096" -> bytes.
Result<uint64_t> ParseSize(std::string_view text);
// "100ms", "2.5s", "250us", "5min", "24h", "7d" -> nanoseconds (>= 1).
Result<int64_t> ParseDurationNs(std::string_view text);
std::string FormatBytes(uint64_t bytes);     // "1.5 GiB"
std::string FormatDuration(double seconds);  // "1:05" or "2:03:10"

// A one-line progress bar on a TTY (stderr), redrawn at most 10 times a second.
// Prints nothing when stderr is not a terminal.
class ProgressBar {
 public:
  ProgressBar(std::string label, std::string unit);
  void Update(uint64_t done, uint64_t total, uint64_t bytes = 0);
  void Finish();  // clears the line

 private:
  std::string label_, unit_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_;
  bool drawn_ = false;
};

void RegisterPack(CLI::App& app, int* exit_code);
void RegisterVerify(CLI::App& app, int* exit_code);
void RegisterInspect(CLI::App& app, int* exit_code);
void RegisterDevices(CLI::App& app, int* exit_code);
void RegisterBench(CLI::App& app, int* exit_code);
void RegisterWatch(CLI::App& app, int* exit_code);
void RegisterTrace(CLI::App& app, int* exit_code);
void RegisterDoctor(CLI::App& app, int* exit_code);  // doctor and report
void RegisterFleet(CLI::App& app, int* exit_code);
void RegisterFleetRules(CLI::App& fleet, int* exit_code);  // `fleet rules`
void RegisterTune(CLI::App& app, int* exit_code);          // tune and tune feed
void RegisterRun(CLI::App& app, int* exit_code);           // run-instrumented

}  // namespace saturate::cli

#endif  // SATURATE_TOOLS_SATURATE_CLI_H_
