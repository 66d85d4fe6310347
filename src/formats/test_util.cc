#include "formats/test_util.h"

#include <archive.h>
#include <archive_entry.h>

#include <fstream>
#include <span>
#include <stdexcept>

#include "formats/tfrecord.h"

namespace saturate::formats {

std::string MakeTar(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_set_bytes_per_block(a, 0);
  archive_write_open(
      a, &out, nullptr,
      [](archive*, void* client, const void* buf, size_t n) -> la_ssize_t {
        static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
        return static_cast<la_ssize_t>(n);
      },
      nullptr);
  for (const auto& [name, data] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_write_header(a, e);
    archive_write_data(a, data.data(), data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

std::string MakeTfrecord(const std::vector<std::string>& records) {
  std::vector<std::byte> out;
  for (const std::string& r : records)
    AppendTfrecord(std::as_bytes(std::span(r.data(), r.size())), &out);
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace saturate::formats
