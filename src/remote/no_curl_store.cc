// OpenObjectStore in a build without libcurl (SATURATE_WITH_REMOTE=OFF): every
// s3:// or http(s):// location is Unavailable, naming the build option, so a
// minimal build (e.g. on a GPU node without libcurl's -dev package) still
// reads local datasets and says plainly why a remote one fails.
#include "saturate/remote/object_store.h"

namespace saturate::remote {

Result<std::unique_ptr<ObjectStore>> OpenObjectStore(const ObjectUrl& url, const StoreOptions&) {
  return Status::Unavailable(url.Describe("") +
                             ": saturate was built without libcurl "
                             "(SATURATE_WITH_REMOTE=OFF), so it reads no s3:// or "
                             "http(s):// location; rebuild with -DSATURATE_WITH_REMOTE=ON");
}

}  // namespace saturate::remote
