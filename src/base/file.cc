#include "base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace saturate {
namespace {

std::string ParentDir(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

Status WriteFully(int fd, std::span<const std::byte> data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("write " + path, errno);
    }
    data = data.subspan(static_cast<size_t>(w));
  }
  return Status::OK();
}

Result<std::unique_ptr<WritableFile>> WritableFile::Create(const std::string& path) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return Status::AlreadyExists(tmp + " exists (another writer, or a crash)");
    return Status::FromErrno("create " + tmp, errno);
  }
  return std::unique_ptr<WritableFile>(new WritableFile(path, fd));
}

WritableFile::~WritableFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path().c_str());
}

Status WritableFile::Append(std::span<const std::byte> data) {
  if (fd_ < 0) return Status::Internal("append to closed file " + path_);
  SATURATE_RETURN_IF_ERROR(WriteFully(fd_, data, temp_path()));
  size_ += data.size();
  return Status::OK();
}

Status WritableFile::PadTo(uint64_t alignment) {
  static constexpr std::byte kZeros[256] = {};
  uint64_t pad = (alignment - size_ % alignment) % alignment;
  while (pad > 0) {
    uint64_t n = pad < sizeof(kZeros) ? pad : sizeof(kZeros);
    SATURATE_RETURN_IF_ERROR(Append(std::span(kZeros, n)));
    pad -= n;
  }
  return Status::OK();
}

Status WritableFile::Commit() {
  if (fd_ < 0) return Status::Internal("commit of closed file " + path_);
  if (::fsync(fd_) != 0) return Status::FromErrno("fsync " + temp_path(), errno);
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return Status::FromErrno("close " + temp_path(), errno);
  if (::rename(temp_path().c_str(), path_.c_str()) != 0) {
    return Status::FromErrno("rename " + temp_path() + " to " + path_, errno);
  }
  committed_ = true;
  return SyncDir(ParentDir(path_));
}

Status WriteFileAtomic(const std::string& path, std::string_view data) {
  SATURATE_ASSIGN_OR_RETURN(auto file, WritableFile::Create(path));
  SATURATE_RETURN_IF_ERROR(file->Append(data));
  return file->Commit();
}

Result<std::string> ReadFileToString(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::FromErrno("open " + path, errno);
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return Status::FromErrno("read " + path, e);
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open directory " + dir, errno);
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0) return Status::FromErrno("fsync directory " + dir, e);
  return Status::OK();
}

Result<std::unique_ptr<ReadOnlyFile>> ReadOnlyFile::Open(const std::string& path, bool allow_mmap) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::FromErrno("open " + path, errno);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::FromErrno("stat " + path, e);
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  const std::byte* map = nullptr;
  if (allow_mmap && size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) map = static_cast<const std::byte*>(p);
  }
  return std::unique_ptr<ReadOnlyFile>(new ReadOnlyFile(path, fd, size, map));
}

ReadOnlyFile::~ReadOnlyFile() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), size_);
  ::close(fd_);
}

void ReadOnlyFile::Prefetch(uint64_t offset, uint64_t n) const {
  if (map_ == nullptr || offset >= size_) return;
  constexpr uintptr_t kLine = 64;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(map_ + offset) & ~(kLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(map_ + offset + std::min(n, size_ - offset));
  for (uintptr_t p = begin; p < end; p += kLine) {
    __builtin_prefetch(reinterpret_cast<const void*>(p));
  }
}

Result<std::span<const std::byte>> ReadOnlyFile::Read(uint64_t offset, uint64_t n,
                                                      std::vector<std::byte>* scratch) const {
  if (offset > size_ || n > size_ - offset) {
    return Status::Corruption(path_ + ": read of " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + " past end of file (" +
                              std::to_string(size_) + " bytes)");
  }
  if (map_ != nullptr) return std::span<const std::byte>(map_ + offset, n);
  scratch->resize(n);
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, scratch->data() + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("pread " + path_, errno);
    }
    if (r == 0) return Status::Corruption(path_ + ": file shrank while reading");
    done += static_cast<uint64_t>(r);
  }
  return std::span<const std::byte>(scratch->data(), n);
}

}  // namespace saturate
