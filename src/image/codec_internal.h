// Plumbing shared by codec.cc and the transforms (decode_crop.cc,
// jpeg_cut.h, scratch.h): libjpeg error handling and an owning libpng reader.
//
// libjpeg reports errors through a callback that must not return: we
// longjmp back into Guarded(), which then returns false and leaves the
// formatted message in JpegErrorMgr::message. Code run under Guarded() must
// not own objects with destructors (longjmp would skip them). Nothing is
// ever printed: libjpeg's default output_message writes to stderr.
//
// Thread-safety: one JpegErrorMgr per libjpeg object, used by one thread.
#ifndef SATURATE_IMAGE_CODEC_INTERNAL_H_
#define SATURATE_IMAGE_CODEC_INTERNAL_H_

// clang-format off
#include <cstdio>  // jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include <png.h>

#include <csetjmp>
#include <string>

#include "saturate/base/status.h"

namespace saturate::image {

struct JpegErrorMgr {
  jpeg_error_mgr pub;  // First member: libjpeg only sees this part.
  std::jmp_buf jump;
  bool warnings_are_errors = true;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] inline void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
  cinfo->err->format_message(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Level -1 is a warning: corrupt or truncated data that libjpeg would paper
// over with gray pixels. Levels >= 0 are trace messages.
inline void JpegEmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;
  ++cinfo->err->num_warnings;
  if (reinterpret_cast<JpegErrorMgr*>(cinfo->err)->warnings_are_errors) JpegErrorExit(cinfo);
}

inline void JpegOutputMessage(j_common_ptr) {}

inline jpeg_error_mgr* InitJpegErrors(JpegErrorMgr* err, bool warnings_are_errors) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = JpegErrorExit;
  err->pub.emit_message = JpegEmitMessage;
  err->pub.output_message = JpegOutputMessage;
  err->warnings_are_errors = warnings_are_errors;
  err->message[0] = '\0';
  return &err->pub;
}

// Runs `body` (libjpeg calls only); false if libjpeg raised an error.
template <typename F>
bool Guarded(JpegErrorMgr& err, F&& body) {
  if (setjmp(err.jump) != 0) return false;
  body();
  return true;
}

// Owns a png_image; png_image_free is safe after success, failure or both.
struct PngReader {
  PngReader() { image.version = PNG_IMAGE_VERSION; }
  ~PngReader() { png_image_free(&image); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;
  Status Error() const { return Status::Corruption(std::string("PNG: ") + image.message); }

  png_image image{};
};

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_CODEC_INTERNAL_H_
