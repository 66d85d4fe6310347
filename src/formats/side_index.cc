#include "formats/side_index.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/file.h"

namespace saturate::formats {
namespace {

constexpr char kMagic[8] = {'S', 'A', 'T', 'F', 'I', 'D', 'X', '1'};
constexpr uint32_t kVersion = 2;  // 1: no JPEG tables (still read)
constexpr uint64_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

class Cursor {
 public:
  explicit Cursor(std::span<const std::byte> b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(size_t n, std::string* s) {
    if (b_.size() - pos_ < n) return false;
    s->assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  std::span<const std::byte> Take(size_t n) {  // n <= left()
    pos_ += n;
    return b_.subspan(pos_ - n, n);
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  std::span<const std::byte> b_;
  size_t pos_ = 0;
};

std::string DefaultIndexDir() {
  if (const char* d = std::getenv("SATURATE_INDEX_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/saturate/index";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return std::string(h) + "/.cache/saturate/index";
  }
  return "";
}

}  // namespace

std::string EncodeFileIndex(const FileIndex& index) {
  std::string out(kMagic, sizeof(kMagic));
  Put(&out, kVersion);
  Put(&out, index.kind);
  Put(&out, index.data_size);
  Put(&out, index.data_mtime_ns);
  Put(&out, static_cast<uint64_t>(index.entries.size()));
  for (const IndexEntry& e : index.entries) {
    Put(&out, e.offset);
    Put(&out, e.size);
    Put(&out, static_cast<uint32_t>(e.name.size()));
    out += e.name;
  }
  Put(&out, static_cast<uint8_t>(index.has_jpeg_tables));
  if (index.has_jpeg_tables) {
    Put(&out, static_cast<uint64_t>(index.jpeg_table_starts.size() - 1));
    for (uint64_t start : index.jpeg_table_starts) Put(&out, start);
    out.append(reinterpret_cast<const char*>(index.jpeg_tables.data()), index.jpeg_tables.size());
  }
  Put(&out, static_cast<uint64_t>(XXH3_64bits(out.data(), out.size())));
  return out;
}

Result<FileIndex> DecodeFileIndex(std::span<const std::byte> bytes, const std::string& source) {
  auto bad = [&](const std::string& what) { return Status::Corruption(source + ": " + what); };
  if (bytes.size() < kHeaderBytes + 8 || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    return bad("not a saturate index (bad magic or too short)");
  }
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (sum != XXH3_64bits(bytes.data(), bytes.size() - 8)) return bad("index checksum mismatch");
  Cursor c(bytes.subspan(8, bytes.size() - 16));
  FileIndex index;
  uint32_t version = 0;
  uint64_t count = 0;
  c.Get(&version);
  c.Get(&index.kind);
  c.Get(&index.data_size);
  c.Get(&index.data_mtime_ns);
  c.Get(&count);
  if (version != 1 && version != kVersion) return bad("index version " + std::to_string(version));
  if (count > c.left() / 20) return bad("entry count " + std::to_string(count) + " too large");
  index.entries.resize(count);
  for (IndexEntry& e : index.entries) {
    uint32_t n = 0;
    if (!c.Get(&e.offset) || !c.Get(&e.size) || !c.Get(&n) || !c.GetString(n, &e.name)) {
      return bad("truncated entry");
    }
    if (e.offset > index.data_size || e.size > index.data_size - e.offset) {
      return bad("entry outside the data file");
    }
  }
  uint8_t has = 0;
  if (version >= 2 && (!c.Get(&has) || has > 1)) return bad("truncated JPEG tables");
  if (has == 1) {
    uint64_t samples = 0;
    if (!c.Get(&samples) || samples >= c.left() / 8) return bad("truncated JPEG tables");
    index.jpeg_table_starts.resize(samples + 1);
    for (uint64_t& start : index.jpeg_table_starts) c.Get(&start);
    const uint64_t blob = c.left();
    for (size_t s = 0; s < samples; ++s) {
      if (index.jpeg_table_starts[s] > index.jpeg_table_starts[s + 1]) {
        return bad("JPEG table " + std::to_string(s) + " ends before it starts");
      }
    }
    if (index.jpeg_table_starts[0] != 0 || index.jpeg_table_starts[samples] != blob) {
      return bad("JPEG tables do not fill their " + std::to_string(blob) + " bytes");
    }
    index.jpeg_tables = c.Take(blob);
    index.has_jpeg_tables = true;
  }
  if (c.left() != 0) return bad("trailing bytes");
  return index;
}

std::vector<std::string> IndexCandidates(const std::string& data_path,
                                         const std::string& index_dir) {
  // A remote object's (its URL) is only in the index folder.
  const bool remote = data_path.find("://") != std::string::npos;
  std::vector<std::string> out;
  if (!remote) out.push_back(data_path + ".satidx");
  const std::string dir = index_dir.empty() ? DefaultIndexDir() : index_dir;
  if (!dir.empty()) {
    std::error_code ec;
    std::string abs =
        remote ? data_path : std::filesystem::absolute(data_path, ec).lexically_normal().string();
    if (ec) abs = data_path;
    char hash[24];
    std::snprintf(hash, sizeof(hash), "%016llx",
                  static_cast<unsigned long long>(XXH3_64bits(abs.data(), abs.size())));
    out.push_back(dir + "/" + hash + "-" + std::filesystem::path(data_path).filename().string() +
                  ".satidx");
  }
  return out;
}

bool SaveFileIndex(const FileIndex& index, const std::vector<std::string>& candidates) {
  const std::string bytes = EncodeFileIndex(index);
  for (const std::string& path : candidates) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) continue;
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (std::fclose(f) == 0 && ok && std::rename(tmp.c_str(), path.c_str()) == 0) return true;
    std::remove(tmp.c_str());
  }
  return false;
}

IndexBuildLock IndexBuildLock::Acquire(const std::vector<std::string>& candidates) {
  for (const std::string& candidate : candidates) {
    const std::string path = candidate + ".lock";
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) continue;
    int rc;
    do {
      rc = ::flock(fd, LOCK_EX);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) return IndexBuildLock(fd);
    ::close(fd);  // no flock here (ENOLCK, EOPNOTSUPP): build without one
    return IndexBuildLock();
  }
  return IndexBuildLock();
}

IndexBuildLock& IndexBuildLock::operator=(IndexBuildLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

IndexBuildLock::~IndexBuildLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace saturate::formats
