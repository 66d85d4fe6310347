// Staging: the output directory of a pack, built beside its final place.
//
// Begin() creates `OUT.partial`; Commit() renames it to OUT (moving an old
// dataset at OUT aside first when replacing), so OUT only ever holds a
// complete dataset. Destroying an uncommitted Staging removes the partial
// directory. Thread-safety: single-threaded.
#ifndef SATURATE_PACK_STAGING_H_
#define SATURATE_PACK_STAGING_H_

#include <memory>
#include <string>

#include "saturate/base/status.h"

namespace saturate::pack {

class Staging {
 public:
  // Refuses (AlreadyExists) when OUT exists and is not empty, unless `force`
  // and OUT is a saturate dataset or an empty directory.
  static Result<std::unique_ptr<Staging>> Begin(const std::string& out, bool force);
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  const std::string& dir() const { return partial_; }
  Status Commit();

 private:
  Staging(std::string out, std::string partial)
      : out_(std::move(out)), partial_(std::move(partial)) {}
  std::string out_;
  std::string partial_;
  bool committed_ = false;
};

}  // namespace saturate::pack

#endif  // SATURATE_PACK_STAGING_H_
