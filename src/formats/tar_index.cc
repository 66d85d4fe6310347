#include "formats/tar_index.h"

#include <sys/stat.h>

#include <algorithm>
#include <memory>

#if SATURATE_WITH_WEBDATASET
#include <archive.h>
#include <archive_entry.h>
#endif

namespace saturate::formats {

#if SATURATE_WITH_WEBDATASET
namespace {

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};

std::string ArchiveError(archive* a) {
  const char* e = archive_error_string(a);
  return e != nullptr ? e : "truncated or malformed header";
}

}  // namespace

Result<std::vector<TarMember>> IndexTar(std::span<const std::byte> file) {
  std::unique_ptr<archive, ArchiveFree> a(archive_read_new());
  if (!a) return Status::Internal("libarchive: out of memory");
  archive_read_support_format_tar(a.get());
  if (file.empty()) return Status::Corruption("empty file (not a tar archive)");
  if (archive_read_open_memory(a.get(), file.data(), file.size()) != ARCHIVE_OK) {
    return Status::Corruption("not a tar archive: " + ArchiveError(a.get()));
  }
  const std::byte* begin = file.data();
  const std::byte* end = begin + file.size();
  std::vector<TarMember> members;
  for (;;) {
    archive_entry* entry = nullptr;
    const int rc = archive_read_next_header(a.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    const std::string after =
        members.empty() ? "at the start" : "after member '" + members.back().name + "'";
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
      return Status::Corruption("bad tar header " + after + ": " + ArchiveError(a.get()));
    }
    const char* path = archive_entry_pathname(entry);
    TarMember m;
    m.name = path != nullptr ? path : "";
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    if (archive_entry_size_is_set(entry) == 0 || archive_entry_size(entry) < 0) {
      return Status::Corruption("member '" + m.name + "': no size");
    }
    m.size = static_cast<uint64_t>(archive_entry_size(entry));
    // The data blocks are views of `file`: their position is the offset.
    const void* buf = nullptr;
    size_t n = 0;
    la_int64_t at = 0;
    uint64_t seen = 0;
    bool first = true;
    for (;;) {
      const int r = archive_read_data_block(a.get(), &buf, &n, &at);
      if (r == ARCHIVE_EOF) break;
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        return Status::Corruption("member '" + m.name + "' (" + std::to_string(m.size) +
                                  " bytes): " + ArchiveError(a.get()));
      }
      if (n == 0) continue;
      const auto* p = static_cast<const std::byte*>(buf);
      if (p < begin || p + n > end || at < 0) {
        return Status::Unimplemented("member '" + m.name +
                                     "': data is not stored contiguously (sparse file?)");
      }
      if (first) {
        m.offset = static_cast<uint64_t>(p - begin) - static_cast<uint64_t>(at);
        first = false;
      } else if (static_cast<uint64_t>(p - begin) != m.offset + static_cast<uint64_t>(at)) {
        return Status::Unimplemented("member '" + m.name + "': data is not contiguous");
      }
      seen = std::max(seen, static_cast<uint64_t>(at) + n);
    }
    if (seen != m.size) {
      return Status::Corruption("member '" + m.name + "': truncated (" + std::to_string(seen) +
                                " of " + std::to_string(m.size) + " bytes)");
    }
    if (m.size == 0) {
      // No data block: an empty member still has a place; it is never read.
      m.offset = 0;
    }
    members.push_back(std::move(m));
  }
  return members;
}

#else

Result<std::vector<TarMember>> IndexTar(std::span<const std::byte>) {
  return Status::Unavailable(
      "saturate was built without libarchive (SATURATE_WITH_WEBDATASET=OFF), so it reads no "
      "WebDataset tar shard; rebuild with -DSATURATE_WITH_WEBDATASET=ON");
}

#endif  // SATURATE_WITH_WEBDATASET

bool SplitSampleName(const std::string& name, std::string* key, std::string* extension) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) return false;
  *key = name.substr(0, dot);
  *extension = name.substr(dot + 1);
  std::transform(extension->begin(), extension->end(), extension->begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return !extension->empty();
}

}  // namespace saturate::formats
