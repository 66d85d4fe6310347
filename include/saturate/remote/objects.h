// Whole-object helpers over an ObjectStore, for writers that keep many
// objects under one prefix (checkpoints): a parallel ranged download into
// caller memory, and an in-memory store for unit tests.
//
// FetchInto splits one object into parts of `part_bytes` fetched by up to
// `requests` threads with ranged GETs (each retried by the store); the
// object's size must be known (a manifest lists it). NewMemoryStore keeps
// objects in a map; it never touches the network.
//
// Ownership: FetchInto writes only into `out` and keeps nothing; a memory
// store owns its objects. Thread-safety: FetchInto may run on any number of
// threads at once (the store allows it); every method of a memory store may
// be called from any thread.
#ifndef SATURATE_REMOTE_OBJECTS_H_
#define SATURATE_REMOTE_OBJECTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "saturate/base/status.h"
#include "saturate/remote/object_store.h"

namespace saturate::remote {

struct FetchOptions {
  int requests = 4;                          // ranged GETs in flight at once (>= 1)
  uint64_t part_bytes = uint64_t{16} << 20;  // bytes per ranged GET (>= 1)
};

// Reads bytes [offset, offset + out.size()) of object `name` into `out`.
// The first failure (a missing object: NotFound; a short one: Corruption,
// both naming the object) is returned after the other parts finish.
Status FetchInto(ObjectStore& store, std::string_view name, uint64_t offset,
                 std::span<std::byte> out, const FetchOptions& options = {});

// An in-memory ObjectStore at `url` (S3 semantics: Put replaces an object
// whole, List returns every name under the prefix, sorted). Unit tests only.
std::unique_ptr<ObjectStore> NewMemoryStore(ObjectUrl url);

}  // namespace saturate::remote

#endif  // SATURATE_REMOTE_OBJECTS_H_
