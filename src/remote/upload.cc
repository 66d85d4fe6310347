// UploadDataset: a packed dataset directory to an S3 location, manifest last.
#include <algorithm>
#include <filesystem>

#include "saturate/remote/range_reader.h"

namespace saturate::remote {

StoreOptions UploadStoreOptions(const std::string& endpoint, uint64_t multipart_threshold_bytes) {
  StoreOptions store;
  store.endpoint = endpoint;
  store.multipart_threshold_bytes = multipart_threshold_bytes;
  store.part_bytes =
      std::clamp<uint64_t>(multipart_threshold_bytes, uint64_t{5} << 20, uint64_t{16} << 20);
  return store;
}

Status UploadDataset(const std::string& local_dir, const std::string& url_text, bool overwrite,
                     const StoreOptions& options) {
  constexpr std::string_view kManifest = "manifest.json";
  SATURATE_ASSIGN_OR_RETURN(ObjectUrl url, ParseObjectUrl(url_text));
  if (url.scheme != Scheme::kS3) {
    return Status::InvalidArgument(url_text + ": pack writes to s3:// locations only");
  }
  SATURATE_ASSIGN_OR_RETURN(auto store, OpenObjectStore(url, options));
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(local_dir, ec)) {
    if (entry.is_regular_file() && entry.path().filename() != kManifest) {
      names.push_back(entry.path().filename().string());
    }
  }
  if (ec) return Status::IOError(local_dir + ": " + ec.message());
  if (!std::filesystem::exists(local_dir + "/" + std::string(kManifest))) {
    return Status::NotFound(local_dir + ": no manifest.json (not a complete dataset)");
  }
  std::sort(names.begin(), names.end());
  auto existing = store->Get(kManifest);
  if (existing.ok()) {
    if (!overwrite) {
      return Status::AlreadyExists(url.Describe(kManifest) +
                                   " exists; pass --force to replace that dataset");
    }
    // Readers must never pair the old manifest with new shards.
    SATURATE_RETURN_IF_ERROR(store->Delete(kManifest));
  } else if (existing.status().code() != StatusCode::kNotFound) {
    return existing.status();
  }
  for (const std::string& name : names) {
    SATURATE_RETURN_IF_ERROR(store->PutFile(name, local_dir + "/" + name));
  }
  return store->PutFile(kManifest, local_dir + "/" + std::string(kManifest));
}

}  // namespace saturate::remote
