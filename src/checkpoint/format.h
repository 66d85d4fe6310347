// The on-disk format of one checkpoint (docs/checkpoint.md), shared by the
// writer (checkpointer.cc) and the reader (Verify, LoadNewest):
//
//   DIR/step-<N>/            a committed checkpoint (N: decimal step)
//     tensors.bin            every tensor's bytes, each at a 64-byte aligned
//                            offset, zero padding between them
//     metadata.bin           the caller's opaque blob (Python: a pickle)
//     manifest.json          written last: files with size and XXH3-64,
//                            tensors with file/offset/bytes/dtype/shape, and
//                            the XXH3-64 of its own canonical body
//   DIR/step-<N>.tmp/        a save in progress (or interrupted): never read
//
// Thread-safety: pure functions.
#ifndef SATURATE_CHECKPOINT_FORMAT_H_
#define SATURATE_CHECKPOINT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/checkpoint/checkpointer.h"

namespace saturate::checkpoint {

inline constexpr std::string_view kFormatName = "saturate-checkpoint";
inline constexpr int kFormatVersion = 1;
inline constexpr std::string_view kManifestFile = "manifest.json";
inline constexpr std::string_view kTensorsFile = "tensors.bin";
inline constexpr std::string_view kMetadataFile = "metadata.bin";
inline constexpr std::string_view kTmpSuffix = ".tmp";
// Tensor offsets in tensors.bin are multiples of this, so a mapped tensor is
// aligned for every dtype (and for vector loads).
inline constexpr uint64_t kTensorAlignment = 64;

// "step-<N>".
std::string StepDirName(uint64_t step);
// Parses "step-<N>" or "step-<N>.tmp"; false for any other name.
bool ParseStepDirName(std::string_view name, uint64_t* step, bool* tmp);

// Offsets of each tensor in tensors.bin, and its total size in `*total_bytes`.
std::vector<uint64_t> LayoutTensors(std::span<const TensorRef> tensors, uint64_t* total_bytes);

uint64_t Checksum(std::span<const std::byte> bytes);
std::string HexChecksum(uint64_t xxh3);

// Incremental XXH3-64 over a file written in chunks.
class StreamingChecksum {
 public:
  StreamingChecksum();
  ~StreamingChecksum();
  StreamingChecksum(const StreamingChecksum&) = delete;
  StreamingChecksum& operator=(const StreamingChecksum&) = delete;
  void Update(const void* data, size_t bytes);
  uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

std::string SerializeManifest(const Manifest& m);
// `source` names the file in errors. Checks the format name, version, the
// body checksum and that tensors lie inside their files.
Result<Manifest> ParseManifest(std::string_view text, std::string_view source);

}  // namespace saturate::checkpoint

#endif  // SATURATE_CHECKPOINT_FORMAT_H_
