#include "feed_run.h"

namespace saturate::cli {

Result<std::vector<feed::FieldOptions>> ParseTransforms(const std::vector<std::string>& specs) {
  std::vector<feed::FieldOptions> fields;
  for (const std::string& spec : specs) {
    SATURATE_ASSIGN_OR_RETURN(feed::FieldOptions field, feed::ParseFieldOptions(spec));
    fields.push_back(std::move(field));
  }
  return fields;
}

}  // namespace saturate::cli
