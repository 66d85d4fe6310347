// VerifyDataset: checks every byte of a dataset against its checksums.
//
// Unlike Dataset::Open, which stops at the first problem, verify keeps going
// and reports up to `max_problems` problems, each with the shard, the record
// number inside it (when one is involved) and the byte offset.
//
// Thread-safety: pure function of the files; safe to call concurrently.
#ifndef SATURATE_FORMAT_VERIFY_H_
#define SATURATE_FORMAT_VERIFY_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/format/schema.h"

namespace saturate::format {

struct VerifyProblem {
  std::string file;     // "manifest.json" or a shard file name
  int64_t record = -1;  // record number inside the shard, -1 if none
  int64_t offset = -1;  // byte offset in the file, -1 if unknown
  std::string what;
  std::string ToString() const;  // "shard-00000.srec: record 7 at offset 4096: checksum ..."
};

struct VerifyReport {
  uint64_t records_checked = 0;
  uint64_t bytes_checked = 0;
  uint64_t problem_count = 0;           // all problems found
  std::vector<VerifyProblem> problems;  // the first `max_problems` of them
  Manifest manifest;                    // when the manifest itself parsed
  bool ok() const { return problem_count == 0; }
};

struct VerifyOptions {
  size_t max_problems = 20;
  bool use_mmap = true;
  std::string endpoint;  // s3:// datasets: the S3 endpoint (else AWS_ENDPOINT_URL)
  // Called after each shard with (bytes checked so far, total bytes).
  std::function<void(uint64_t, uint64_t)> progress;
};

// Returns a report (possibly listing problems); a non-OK Status only when the
// directory cannot be examined at all (e.g. it does not exist).
Result<VerifyReport> VerifyDataset(const std::string& dir, const VerifyOptions& options = {});

// Checks one shard already in memory against `info` (expected name, size,
// record count) and `schema`, adding to `report`. Used by VerifyDataset and
// by the shard parser's fuzz target.
void VerifyShardBytes(const ShardInfo& info, std::span<const std::byte> shard, const Schema& schema,
                      VerifyReport* report, size_t max_problems = 20);

}  // namespace saturate::format

#endif  // SATURATE_FORMAT_VERIFY_H_
