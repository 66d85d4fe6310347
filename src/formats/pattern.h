// File patterns for datasets stored as many shards: brace ranges and lists
// (`shards-{000..099}.tar`, `{train,val}.tar`) expanded first, then shell
// globs (`*`, `?`, `[...]`) matched against the file system.
//
// Order: brace alternatives in the order written; the files one glob matches
// sorted by name. A plain path is returned as is when it exists.
//
// Thread-safety: pure functions (the glob reads the file system).
#ifndef SATURATE_FORMATS_PATTERN_H_
#define SATURATE_FORMATS_PATTERN_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/remote/object_store.h"

namespace saturate::formats {

// Expands braces only: "a{1..3}b" -> a1b a2b a3b; "{08..10}" keeps the
// width of the wider bound (08 09 10); "{x,y}" -> x y. Nested braces work.
// InvalidArgument for an unbalanced brace or a range over 1,000,000 items.
Result<std::vector<std::string>> ExpandBraces(const std::string& pattern);

// Braces, then globs. Globs leave out the indexes saturate writes beside
// data files (FILE.satidx, its .lock and temporaries), so that
// "tfrecord:train-*" matches the same files after its first open. NotFound
// (naming the pattern) when nothing matches.
Result<std::vector<std::string>> ExpandPattern(const std::string& pattern);

// Braces, then globs, against `names` (the objects of a remote location,
// relative to it) instead of the file system: a glob matches within one
// path segment ('*' does not cross '/'); a name without wildcards is kept
// as it is, listed or not (fetching it says whether it exists). Sorted per
// expanded name, as ExpandPattern. NotFound (naming the pattern) when
// nothing matches.
Result<std::vector<std::string>> MatchPattern(const std::string& pattern,
                                              const std::vector<std::string>& names);

// True when a name has glob characters (* ? [).
bool HasWildcards(std::string_view name);

// The objects a remote pattern names ("s3://bucket/dir/shards-*.tar"): its
// location (up to the last '/') is listed only when the name has wildcards
// (an HTTP server cannot list; a missing object fails when read). Braces and
// globs only in the last part of the name.
struct RemoteFiles {
  std::shared_ptr<remote::ObjectStore> store;
  std::vector<std::string> names;  // relative to the store's location
};
Result<RemoteFiles> ExpandRemotePattern(const std::string& pattern,
                                        const remote::StoreOptions& options);

}  // namespace saturate::formats

#endif  // SATURATE_FORMATS_PATTERN_H_
