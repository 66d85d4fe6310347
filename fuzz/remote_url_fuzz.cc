// libFuzzer target: arbitrary bytes as a remote dataset URL and as an AWS
// credentials/config file. A URL that parses must describe objects under
// itself; a credentials file must resolve or fail cleanly, and a resolved
// profile's keys must come from the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "saturate/remote/url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace saturate::remote;  // NOLINT: a fuzz target's one namespace
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto url = ParseObjectUrl(text);
  if (url.ok()) {
    const std::string d = url->Describe("manifest.json");
    if (!d.ends_with("/manifest.json")) std::abort();
    if (url->scheme == Scheme::kS3 && (url->bucket.size() < 3 || url->bucket.size() > 63)) {
      std::abort();
    }
  }
  (void)ParseIniSection(text, "default");
  ConfigSources src{[](const char* name) -> const char* {
                      if (std::string_view(name) == "HOME") return "/home/fuzz";
                      if (std::string_view(name) == "AWS_PROFILE") return "default";
                      return nullptr;
                    },
                    [&text](const std::string&) -> saturate::Result<std::string> { return text; }};
  auto config = ResolveS3Config(src, "");
  if (config.ok() && !config->credentials.empty() &&
      text.find(config->credentials.access_key_id) == std::string::npos) {
    std::abort();
  }
  return 0;
}
