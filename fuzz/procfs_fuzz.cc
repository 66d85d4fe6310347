// Fuzzes the /proc parsers of saturate watch: the first byte picks the file
// kind, the rest is its text. A parser may refuse input (a Status), never crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "watch/procfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace saturate::watch;
  switch (data[0] % 6) {
    case 0:
      (void)ParseCpuStat(text);
      break;
    case 1:
      (void)ParseMemInfo(text);
      break;
    case 2:
      (void)ParseDiskStats(text);
      break;
    case 3:
      (void)ParseCpuPressureSomeUs(text);
      break;
    case 4:
      (void)ParseChildren(text);
      break;
    default:
      (void)ParseProcessStat(text);
      break;
  }
  return 0;
}
