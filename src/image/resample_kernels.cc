// The 4-lane passes of the resampler: see resample_kernels.h.
#include "image/resample_kernels.h"

namespace saturate::image {

void WidenRow(const uint8_t* p, int n, float* quad) {
  for (int i = 0; i + 1 < n; ++i) Store4(quad + size_t(i) * 4, WidenPixel<false>(p + 3 * i));
  Store4(quad + size_t(n - 1) * 4, WidenPixel<true>(p + 3 * (n - 1)));
}

void VerticalBytesToFloats(const uint8_t* first, size_t stride, const float* w, int n, size_t len,
                           float* dst) {
  ForEach16(
      len,
      [&](size_t i) {
        F4 v[4], a[4];
        Widen16(first + i, v);
        const F4 w0 = LoadAligned4(w);
        for (int j = 0; j < 4; ++j) a[j] = Mul(w0, v[j]);
        for (int k = 1; k < n; ++k) {
          Widen16(first + stride * k + i, v);
          const F4 wk = LoadAligned4(w + 4 * k);
          for (int j = 0; j < 4; ++j) a[j] = Add(a[j], Mul(wk, v[j]));
        }
        for (int j = 0; j < 4; ++j) Store4(dst + i + 4 * j, a[j]);
      },
      [&](size_t i) {
        float a = w[0] * first[i];
        for (int k = 1; k < n; ++k) a += w[4 * k] * first[stride * k + i];
        dst[i] = a;
      });
}

void VerticalFloatsToBytes(const float* first, size_t stride, const float* w, int n, size_t len,
                           uint8_t* dst) {
  ForEach16(
      len,
      [&](size_t i) {
        F4 a[4];
        const F4 w0 = LoadAligned4(w);
        for (int j = 0; j < 4; ++j) a[j] = Mul(w0, Load4(first + i + 4 * j));
        for (int k = 1; k < n; ++k) {
          const float* row = first + stride * k + i;
          const F4 wk = LoadAligned4(w + 4 * k);
          for (int j = 0; j < 4; ++j) a[j] = Add(a[j], Mul(wk, Load4(row + 4 * j)));
        }
        Store16Bytes(a, dst + i);
      },
      [&](size_t i) {
        float a = w[0] * first[i];
        for (int k = 1; k < n; ++k) a += w[4 * k] * first[stride * k + i];
        dst[i] = ToByte(a);
      });
}

void FloatsToBytes(const float* in, size_t n, uint8_t* dst) {
  ForEach16(
      n,
      [&](size_t i) {
        const F4 v[4] = {Load4(in + i), Load4(in + i + 4), Load4(in + i + 8), Load4(in + i + 12)};
        Store16Bytes(v, dst + i);
      },
      [&](size_t i) { dst[i] = ToByte(in[i]); });
}

void PlaneRow(const float* in, const PlaneTaps& t, int from, int out_w, float* dst) {
  for (int pos = from; pos < out_w; ++pos) {
    const float* p = in + t.offset[pos];
    const float* w = t.Weights(pos);
    float sum = w[0] * p[0];
    for (int k = 1; k < t.taps; ++k) sum = sum + w[k * kPlaneGroup] * p[k];
    dst[pos] = sum;
  }
}

}  // namespace saturate::image
