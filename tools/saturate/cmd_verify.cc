// saturate verify DATASET: check every record checksum and index entry.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "remote_flags.h"
#include "saturate/format/verify.h"
#include "saturate/formats/source.h"

namespace saturate::cli {
namespace {

struct VerifyFlags {
  std::string dataset;
  size_t max_problems = 20;
  bool json = false;
  bool no_mmap = false;
  bool quiet = false;
  remote::RemoteOptions remote;
};

nlohmann::json ProblemJson(const format::VerifyProblem& p) {
  return {{"file", p.file}, {"record", p.record}, {"offset", p.offset}, {"what", p.what}};
}

int RunVerify(const VerifyFlags& f) {
  ProgressBar bar("verify", "B");
  format::VerifyOptions options;
  options.max_problems = f.max_problems;
  options.use_mmap = !f.no_mmap;
  options.endpoint = f.remote.endpoint;
  if (!f.quiet) options.progress = [&](uint64_t done, uint64_t total) { bar.Update(done, total); };
  auto report = format::VerifyDataset(f.dataset, options);
  bar.Finish();
  if (!report.ok()) return ReportError("verify", report.status());
  const format::VerifyReport& r = *report;
  if (f.json) {
    nlohmann::json problems = nlohmann::json::array();
    for (const auto& p : r.problems) problems.push_back(ProblemJson(p));
    nlohmann::json j = {{"dataset", f.dataset},
                        {"ok", r.ok()},
                        {"records_checked", r.records_checked},
                        {"bytes_checked", r.bytes_checked},
                        {"problem_count", r.problem_count},
                        {"problems", problems}};
    std::cout << j.dump(2) << "\n";
  } else if (r.ok()) {
    std::cout << f.dataset << ": OK, " << r.records_checked << " records in "
              << r.manifest.shards.size() << " shard(s), " << FormatBytes(r.bytes_checked)
              << " checked\n";
  } else {
    // WebDataset / TFRecord problems name their files in full.
    const std::string prefix = formats::IsSourcePattern(f.dataset) ? "" : f.dataset + "/";
    for (const auto& p : r.problems) std::cout << prefix << p.ToString() << "\n";
    if (r.problem_count > r.problems.size()) {
      std::cout << "... and " << r.problem_count - r.problems.size() << " more\n";
    }
    std::cout << f.dataset << ": FAILED, " << r.problem_count << " problem(s)\n";
  }
  return r.ok() ? kExitOk : kExitProblems;
}

}  // namespace

void RegisterVerify(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<VerifyFlags>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Check every record's checksum and every index entry; exit 0 only when clean, 1 on problems");
  cmd->add_option("DATASET", f->dataset,
                  "Dataset directory, s3:// / http(s):// URL, or WebDataset / TFRecord files "
                  "(shards-{000..009}.tar, 'train-*.tfrecord')")
      ->required();
  cmd->add_option("--max-problems", f->max_problems, "List at most this many problems")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Machine-readable output");
  cmd->add_flag("--no-mmap", f->no_mmap, "Read with pread instead of mapping the shards");
  cmd->add_flag("-q,--quiet", f->quiet, "No progress bar");
  AddRemoteFlags(cmd, &f->remote, /*cache=*/false);
  cmd->callback([exit_code, f] { *exit_code = RunVerify(*f); });
}

}  // namespace saturate::cli
