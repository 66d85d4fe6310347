// The members of an uncompressed tar file and where their bytes lie.
//
// libarchive parses the headers (ustar, pax, GNU long names); the file is
// read from memory, so each member's data is a view into that memory and its
// byte offset is known exactly: a later read is one slice of the mapped file.
// Only regular files are listed. Errors (a truncated member, a bad header)
// are Corruption naming the member; callers add the file name.
//
// Thread-safety: pure function over a byte span.
#ifndef SATURATE_FORMATS_TAR_INDEX_H_
#define SATURATE_FORMATS_TAR_INDEX_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::formats {

struct TarMember {
  std::string name;     // path inside the archive
  uint64_t offset = 0;  // of the member's data in the file
  uint64_t size = 0;    // data bytes
};

Result<std::vector<TarMember>> IndexTar(std::span<const std::byte> file);

// WebDataset's grouping rule: "dir/abc.seg.jpg" is key "dir/abc", extension
// "seg.jpg" (the key ends at the first dot of the last path component).
// Returns false for a name without an extension (not part of any sample).
bool SplitSampleName(const std::string& name, std::string* key, std::string* extension);

}  // namespace saturate::formats

#endif  // SATURATE_FORMATS_TAR_INDEX_H_
