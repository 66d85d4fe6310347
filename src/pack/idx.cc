#include "pack/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <memory>

namespace saturate::pack {
namespace {

constexpr size_t kPrefixBytes = 4;  // 0x00 0x00 dtype ndims

std::string Hex(uint64_t value, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%0*llx", digits, static_cast<unsigned long long>(value));
  return buf;
}

uint32_t LoadBigEndian32(const std::byte* p) {
  return (std::to_integer<uint32_t>(p[0]) << 24) | (std::to_integer<uint32_t>(p[1]) << 16) |
         (std::to_integer<uint32_t>(p[2]) << 8) | std::to_integer<uint32_t>(p[3]);
}

std::string_view DtypeName(uint8_t code) {
  switch (code) {
    case 0x08:
      return "ubyte";
    case 0x09:
      return "sbyte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "unknown";
  }
}

std::string DimsString(const std::vector<uint32_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s.empty() ? "scalar" : s;
}

// Multiplies out `dims`, failing before the product can exceed the cap
// (which also rules out uint64 overflow).
Result<uint64_t> ElementCount(const std::vector<uint32_t>& dims, std::string_view name) {
  uint64_t total = 1;
  for (uint32_t d : dims) {
    if (d != 0 && total > kMaxIdxDataBytes / d) {
      return Status::Corruption(std::string(name) + ": IDX dims " + DimsString(dims) +
                                " exceed the limit of " + std::to_string(kMaxIdxDataBytes) +
                                " elements");
    }
    total *= d;
  }
  return total;
}

// Closes a gzFile on scope exit.
struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Reads the whole decompressed stream of `path`, refusing to go past `cap`
// bytes so a gzip bomb cannot exhaust memory.
Result<std::vector<std::byte>> ReadGzipOrPlain(const std::string& path, uint64_t cap) {
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::FromErrno("open " + path, errno);
  }
  std::vector<std::byte> out;
  constexpr size_t kChunk = size_t{1} << 20;
  while (true) {
    size_t old = out.size();
    out.resize(old + kChunk);
    int n = gzread(file.get(), out.data() + old, static_cast<unsigned>(kChunk));
    out.resize(old + static_cast<size_t>(n > 0 ? n : 0));
    if (n <= 0) break;
    if (out.size() > cap) {
      return Status::Corruption(path + ": decompressed size exceeds " + std::to_string(cap) +
                                " bytes, too large for an IDX file");
    }
  }
  // A truncated gzip stream reads short and reports Z_BUF_ERROR, not -1,
  // so always consult gzerror once the loop ends.
  int err = Z_OK;
  const char* msg = gzerror(file.get(), &err);
  if (err == Z_ERRNO) return Status::FromErrno("read " + path, errno);
  if (err != Z_OK && err != Z_STREAM_END) {
    // zlib's message already starts with "<path>: ".
    std::string_view reason = msg;
    if (reason.starts_with(path + ": ")) reason.remove_prefix(path.size() + 2);
    return Status::Corruption(path + ": bad gzip stream: " + std::string(reason));
  }
  return out;
}

}  // namespace

std::string IdxShapeString(const IdxArray& array) { return DimsString(array.dims); }

Result<IdxArray> ParseIdx(std::span<const std::byte> bytes, std::string_view name) {
  const std::string file(name);
  if (bytes.size() < kPrefixBytes) {
    return Status::Corruption(file + ": not an IDX file: " + std::to_string(bytes.size()) +
                              " bytes, shorter than the 4-byte magic");
  }
  if (bytes[0] != std::byte{0} || bytes[1] != std::byte{0}) {
    return Status::Corruption(file + ": not an IDX file: bad magic " +
                              Hex(LoadBigEndian32(bytes.data()), 8));
  }
  IdxArray out;
  out.dtype_code = std::to_integer<uint8_t>(bytes[2]);
  if (out.dtype_code != kIdxUbyte) {
    return Status::InvalidArgument(file + ": unsupported IDX dtype " + Hex(out.dtype_code, 2) +
                                   " (" + std::string(DtypeName(out.dtype_code)) +
                                   "); only 0x08 (ubyte) is supported");
  }
  const size_t ndims = std::to_integer<size_t>(bytes[3]);
  const size_t header = kPrefixBytes + 4 * ndims;
  if (bytes.size() < header) {
    return Status::Corruption(file + ": truncated IDX header: " + std::to_string(ndims) +
                              " dims need " + std::to_string(header) + " bytes, found " +
                              std::to_string(bytes.size()));
  }
  for (size_t i = 0; i < ndims; ++i) {
    out.dims.push_back(LoadBigEndian32(bytes.data() + kPrefixBytes + 4 * i));
  }
  SATURATE_ASSIGN_OR_RETURN(const uint64_t expected, ElementCount(out.dims, name));
  const uint64_t found = bytes.size() - header;
  if (found < expected) {
    return Status::Corruption(file + ": truncated IDX data: shape " + IdxShapeString(out) +
                              " expects " + std::to_string(expected) + " bytes, found " +
                              std::to_string(found));
  }
  if (found > expected) {
    return Status::Corruption(file + ": " + std::to_string(found - expected) +
                              " trailing bytes after " + std::to_string(expected) +
                              " bytes of IDX data");
  }
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data() + header);
  out.data.assign(data, data + expected);
  return out;
}

Result<IdxArray> ReadIdx(const std::string& path) {
  // The largest well-formed file; one byte more is certainly invalid.
  constexpr uint64_t kMaxFileBytes = kPrefixBytes + 4 * 255 + kMaxIdxDataBytes;
  SATURATE_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadGzipOrPlain(path, kMaxFileBytes));
  return ParseIdx(bytes, path);
}

Status CheckIdxPair(const IdxArray& images, const IdxArray& labels) {
  if (images.dtype_code != kIdxUbyte || images.dims.size() != 3) {
    return Status::InvalidArgument("IDX images must be a 3-D ubyte array N x H x W, got " +
                                   IdxShapeString(images));
  }
  if (labels.dtype_code != kIdxUbyte || labels.dims.size() != 1) {
    return Status::InvalidArgument("IDX labels must be a 1-D ubyte array of N, got " +
                                   IdxShapeString(labels));
  }
  if (images.dims[0] != labels.dims[0]) {
    return Status::InvalidArgument(
        "IDX images and labels disagree: " + std::to_string(images.dims[0]) + " images but " +
        std::to_string(labels.dims[0]) + " labels");
  }
  return Status::OK();
}

}  // namespace saturate::pack
