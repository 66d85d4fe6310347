// buffer: a std::vector used as a reusable buffer. It only ever grows, so a
// worker that decodes image after image reaches a high-water mark and then
// allocates nothing. Thread-safety: as std::vector.
#ifndef SATURATE_IMAGE_BUFFER_H_
#define SATURATE_IMAGE_BUFFER_H_

#include <cstddef>
#include <vector>

namespace saturate::image {

// Grows `v` to at least n elements (never shrinks) and returns its data.
template <typename T>
T* Grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

template <typename T>
size_t CapacityOf(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_BUFFER_H_
