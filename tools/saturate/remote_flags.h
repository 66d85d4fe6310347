// The flags every command that reads a dataset takes for remote (s3://,
// http(s)://) datasets. One table, so they read the same everywhere.
// Thread-safety: registration only (main thread).
#ifndef SATURATE_TOOLS_REMOTE_FLAGS_H_
#define SATURATE_TOOLS_REMOTE_FLAGS_H_

#include <CLI/CLI.hpp>

#include "saturate/remote/range_reader.h"

namespace saturate::cli {

inline void AddRemoteFlags(CLI::App* cmd, remote::RemoteOptions* o, bool cache = true) {
  cmd->add_option("--endpoint", o->endpoint,
                  "S3 endpoint for s3:// datasets, e.g. http://127.0.0.1:8333 (default "
                  "AWS_ENDPOINT_URL, else AWS)");
  if (!cache) return;
  cmd->add_option("--cache-dir", o->cache_dir,
                  "Remote datasets: keep fetched blocks in this directory (default "
                  "SATURATE_CACHE_DIR; shared safely by the ranks of a node)");
  cmd->add_option("--cache-bytes", o->cache_bytes,
                  "Byte budget of --cache-dir (default SATURATE_CACHE_BYTES, else half the free "
                  "space, at most 64 GiB)");
  cmd->add_option("--readahead-bytes", o->readahead_bytes,
                  "Remote datasets: fetch at most this far ahead of the reads (default 64 MiB)");
  cmd->add_option("--requests", o->requests, "Remote datasets: concurrent requests (default 8)");
}

}  // namespace saturate::cli

#endif  // SATURATE_TOOLS_REMOTE_FLAGS_H_
