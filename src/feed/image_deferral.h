// ImageDeferral: lets the DeviceLoader's GPU decode stage take over the
// decode of some JPEG samples from the loader's worker threads.
//
// A worker writing an image field asks Wants(slot); if yes and the bytes are
// a JPEG whose header reads, it draws the crop and flip exactly as the CPU
// decode would (same random stream, same stored size), and hands the encoded
// bytes, crop and flip to Take() instead of decoding. A restart-marked JPEG
// (as `saturate pack` writes them) is handed over cut to the MCUs around its
// crop, with the crop moved into the cut (image::PlanJpegForDecoder): the
// decoder then reads and decodes only those. The slot's pixels are then
// left unwritten in the host buffer; the taker writes them later (on the
// GPU). Samples and crops are therefore identical to the CPU path's; only
// the pixels differ by the decoder's and resampler's rounding.
//
// Every image sample written calls either Take() or Forget() for its slot.
// Entries are keyed by the address of the field's slot 0 in the batch buffer
// (the host image tensor's data pointer after Loader::Next) and the slot as
// the worker saw it (before skipped samples are compacted away).
//
// Thread-safety: Wants() and Take() are called from many worker threads at
// once; implementations synchronize.
#ifndef SATURATE_FEED_IMAGE_DEFERRAL_H_
#define SATURATE_FEED_IMAGE_DEFERRAL_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "image/transform.h"

namespace saturate::feed {

struct DeferredImage {
  const std::byte* slot0 = nullptr;    // the field's slot 0 in the batch buffer
  uint64_t slot = 0;                   // the sample's slot as written
  uint64_t record = 0;                 // the dataset record it came from (for errors)
  std::span<const std::byte> encoded;  // borrowed for the call: copy it
  image::CropRect crop;                // in the pixels of `encoded`, inside the image
  bool hflip = false;
  bool cut = false;  // `encoded` is the stored JPEG cut around the crop
};

class ImageDeferral {
 public:
  virtual ~ImageDeferral() = default;
  // Whether the sample in `slot` should go to the taker (before any parsing).
  virtual bool Wants(uint64_t slot) = 0;
  // Takes the sample; the worker writes nothing into its slot.
  virtual void Take(const DeferredImage& image) = 0;
  // The sample in `slot` was decoded by the worker (or not deferred): any
  // entry left there by an earlier batch in the same buffer (one discarded
  // by SetEpoch/Restore before it was collected) is dropped.
  virtual void Forget(const std::byte* slot0, uint64_t slot) = 0;
};

}  // namespace saturate::feed

#endif  // SATURATE_FEED_IMAGE_DEFERRAL_H_
