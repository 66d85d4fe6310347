// array_convert: the fixed-size array fields' conversion into a batch slot,
// `dst[i] = float(src[i]) * mul + add` (ToTensor's scale fused with
// Normalize's mean and std), vectorized. Every path (AVX2, SSE2, the
// portable loop) does the same IEEE multiply and add per element, with no
// fused multiply-add, so every path gives the same bytes.
//
// Thread-safety: pure functions.
#ifndef SATURATE_FEED_ARRAY_CONVERT_H_
#define SATURATE_FEED_ARRAY_CONVERT_H_

#include <cstddef>
#include <cstdint>

#include "saturate/format/schema.h"

namespace saturate::feed {

// Whether ScaleToFloat converts from `src`: uint8, int32, int64, float32.
bool CanScaleToFloat(format::DType src);

// How the output is stored. kStreaming writes past the caches (non-temporal
// stores) when dst is 32-byte aligned: no read-for-ownership of the lines,
// so about half the memory traffic, for output that no CPU reads soon
// (a DMA engine's source); a CPU reader would then fetch it from memory.
// Streaming stores are weakly ordered: call StreamingFence() once the
// output is written and before another thread or a device may read it
// (once per chunk of samples: a fence per sample costs more than the
// streaming saves).
enum class Stores { kCached, kStreaming };

// Orders this thread's streaming stores before its later stores.
void StreamingFence();

// Converts n elements of type `src_dtype` at `src` (any alignment) into
// float32 at `dst`. Source and destination must not overlap. Either Stores
// gives the same bytes.
void ScaleToFloat(format::DType src_dtype, const std::byte* src, uint64_t n, float mul, float add,
                  float* dst, Stores stores = Stores::kCached);

// The same with the vector paths off: the reference the tests compare to.
void ScaleToFloatScalar(format::DType src_dtype, const std::byte* src, uint64_t n, float mul,
                        float add, float* dst);

}  // namespace saturate::feed

#endif  // SATURATE_FEED_ARRAY_CONVERT_H_
