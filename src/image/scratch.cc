// DecodeScratch's members (transform.h); the state itself is in scratch.h.
#include "image/scratch.h"

#include "image/buffer.h"

namespace saturate::image {

DecodeScratch::DecodeScratch() : impl_(std::make_unique<Impl>()) {}
DecodeScratch::~DecodeScratch() = default;
DecodeScratch::DecodeScratch(DecodeScratch&&) noexcept = default;
DecodeScratch& DecodeScratch::operator=(DecodeScratch&&) noexcept = default;

size_t DecodeScratch::CapacityBytes() const {
  const Impl& s = *impl_;
  return CapacityOf(s.pixels) + s.resample.CapacityBytes() + CapacityOf(s.mcu_starts) +
         CapacityOf(s.roi_jpeg) + CapacityOf(s.planes) + CapacityOf(s.plane_rows) +
         CapacityOf(s.ycc) + CapacityOf(s.splice_bits);
}
void DecodeScratch::set_only_fast_dct_scales(bool only_fast) {
  impl_->only_fast_dct_scales = only_fast;
}
int DecodeScratch::last_dct_scale_eighths() const { return impl_->last_dct_scale_eighths; }
int DecodeScratch::last_decoded_width() const { return impl_->last_decoded_width; }
int DecodeScratch::last_decoded_height() const { return impl_->last_decoded_height; }
bool DecodeScratch::last_used_restart_index() const { return impl_->last_used_restart_index; }
bool DecodeScratch::last_decoded_ycc_planes() const { return impl_->last_decoded_ycc_planes; }
void DecodeScratch::set_cut_restart_index(bool cut) { impl_->cut_restart_index = cut; }

}  // namespace saturate::image
