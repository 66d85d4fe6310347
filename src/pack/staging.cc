#include "pack/staging.h"

#include <filesystem>

#include "base/file.h"
#include "saturate/format/schema.h"

namespace saturate::pack {
namespace fs = std::filesystem;

namespace {

std::string Parent(const std::string& path) {
  std::string p = fs::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

bool IsDataset(const std::string& dir) {
  std::error_code ec;
  return fs::exists(dir + "/" + std::string(format::kManifestFile), ec);
}

// A replace killed between "OUT -> OUT.old" and "OUT.partial -> OUT" leaves
// the old dataset in OUT.old and nothing at OUT: put it back.
void RecoverInterruptedReplace(const std::string& out) {
  std::error_code ec;
  const std::string old = out + ".old";
  if (!fs::exists(out, ec) && IsDataset(old)) fs::rename(old, out, ec);
}

}  // namespace

Result<std::unique_ptr<Staging>> Staging::Begin(const std::string& out_arg, bool force) {
  // Normalize "out/" to "out" so the partial directory is a sibling.
  std::string out = fs::path(out_arg).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (out.empty() || out == "." || out == "/") {
    return Status::InvalidArgument("output '" + out_arg + "' must name a new directory");
  }
  std::error_code ec;
  RecoverInterruptedReplace(out);
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec))
      return Status::AlreadyExists(out + " exists and is not a directory");
    bool empty = fs::is_empty(out, ec);
    bool dataset = IsDataset(out);
    if (!empty && !force) {
      return Status::AlreadyExists(out + " exists; pass --force to replace it");
    }
    if (!empty && !dataset) {
      return Status::AlreadyExists(out + " is not a saturate dataset; refusing to replace it");
    }
  }
  std::string partial = out + ".partial";
  fs::remove_all(partial, ec);  // the leftover of an interrupted pack, never a dataset
  if (!fs::create_directories(partial, ec)) {
    return Status::IOError("cannot create " + partial + ": " + ec.message());
  }
  return std::unique_ptr<Staging>(new Staging(out, partial));
}

Staging::~Staging() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(partial_, ec);
}

Status Staging::Commit() {
  std::error_code ec;
  std::string old = out_ + ".old";
  bool replacing = fs::exists(out_, ec);
  if (replacing) {
    fs::remove_all(old, ec);
    fs::rename(out_, old, ec);
    if (ec) return Status::IOError("cannot move " + out_ + " aside: " + ec.message());
  }
  fs::rename(partial_, out_, ec);
  if (ec) return Status::IOError("cannot rename " + partial_ + " to " + out_ + ": " + ec.message());
  committed_ = true;
  SATURATE_RETURN_IF_ERROR(SyncDir(Parent(out_)));
  if (replacing) fs::remove_all(old, ec);
  return Status::OK();
}

}  // namespace saturate::pack
