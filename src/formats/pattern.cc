#include "formats/pattern.h"

#include <fnmatch.h>
#include <glob.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string_view>

namespace saturate::formats {
namespace {

constexpr size_t kMaxExpansion = 1000000;

// The index of the '}' that closes the '{' at `open`, or npos.
size_t MatchingBrace(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i;
  }
  return std::string::npos;
}

// Splits the inside of a brace at top-level commas.
std::vector<std::string> SplitTopLevel(const std::string& s) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}') --depth;
    if (s[i] == ',' && depth == 0) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(s.substr(start));
  return parts;
}

bool ParseInt(const std::string& s, long long* v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

// "a..b" as a numeric range, or false when it is not one.
bool ParseRange(const std::string& s, long long* lo, long long* hi, size_t* width) {
  size_t dots = s.find("..");
  if (dots == std::string::npos) return false;
  std::string a = s.substr(0, dots), b = s.substr(dots + 2);
  if (!ParseInt(a, lo) || !ParseInt(b, hi)) return false;
  *width = (a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0')
               ? std::max(a.size(), b.size())
               : 0;
  return true;
}

Status Expand(const std::string& pattern, std::vector<std::string>* out) {
  size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos) {
      return Status::InvalidArgument(pattern + ": unbalanced '}'");
    }
    if (out->size() >= kMaxExpansion) {
      return Status::InvalidArgument("pattern expands to over 1000000 names");
    }
    out->push_back(pattern);
    return Status::OK();
  }
  size_t close = MatchingBrace(pattern, open);
  if (close == std::string::npos) return Status::InvalidArgument(pattern + ": unbalanced '{'");
  const std::string head = pattern.substr(0, open), tail = pattern.substr(close + 1);
  const std::string inside = pattern.substr(open + 1, close - open - 1);
  long long lo, hi;
  size_t width;
  if (ParseRange(inside, &lo, &hi, &width)) {
    const long long step = lo <= hi ? 1 : -1;
    if ((hi - lo) * step >= static_cast<long long>(kMaxExpansion)) {
      return Status::InvalidArgument(pattern + ": range {" + inside + "} is too long");
    }
    for (long long v = lo;; v += step) {
      char num[32];
      std::snprintf(num, sizeof(num), "%0*lld", static_cast<int>(width), v);
      SATURATE_RETURN_IF_ERROR(Expand(head + num + tail, out));
      if (v == hi) break;
    }
    return Status::OK();
  }
  std::vector<std::string> parts = SplitTopLevel(inside);
  if (parts.size() == 1) {
    // "{x}" is not an alternative (as in the shell): keep the braces literally.
    std::vector<std::string> rest;
    SATURATE_RETURN_IF_ERROR(Expand(tail, &rest));
    for (const std::string& r : rest) out->push_back(head + "{" + inside + "}" + r);
    return Status::OK();
  }
  for (const std::string& part : parts) {
    SATURATE_RETURN_IF_ERROR(Expand(head + part + tail, out));
  }
  return Status::OK();
}

// An index beside a data file, its lock or a temporary of it (side_index.h).
bool IsSidecar(std::string_view path) {
  const size_t at = path.rfind(".satidx");
  if (at == std::string_view::npos) return false;
  const std::string_view rest = path.substr(at + 7);
  return rest.empty() || rest == ".lock" || rest.starts_with(".tmp");
}

}  // namespace

Result<std::vector<std::string>> ExpandBraces(const std::string& pattern) {
  std::vector<std::string> out;
  SATURATE_RETURN_IF_ERROR(Expand(pattern, &out));
  return out;
}

bool HasWildcards(std::string_view name) {
  return name.find_first_of("*?[") != std::string_view::npos;
}

Result<std::vector<std::string>> MatchPattern(const std::string& pattern,
                                              const std::vector<std::string>& names) {
  SATURATE_ASSIGN_OR_RETURN(std::vector<std::string> wanted, ExpandBraces(pattern));
  std::vector<std::string> out;
  for (const std::string& want : wanted) {
    if (!HasWildcards(want)) {
      out.push_back(want);
      continue;
    }
    std::vector<std::string> matched;
    for (const std::string& name : names) {
      if (::fnmatch(want.c_str(), name.c_str(), FNM_PATHNAME) == 0 && !IsSidecar(name)) {
        matched.push_back(name);
      }
    }
    std::sort(matched.begin(), matched.end());
    out.insert(out.end(), matched.begin(), matched.end());
  }
  if (out.empty()) return Status::NotFound(pattern + ": no such object(s)");
  return out;
}

Result<RemoteFiles> ExpandRemotePattern(const std::string& pattern,
                                        const remote::StoreOptions& options) {
  const size_t slash = pattern.rfind('/');
  const std::string where = pattern.substr(0, slash), name = pattern.substr(slash + 1);
  if (HasWildcards(where) || where.find('{') != std::string::npos) {
    return Status::InvalidArgument(pattern +
                                   ": wildcards and braces only in the last part of the name");
  }
  SATURATE_ASSIGN_OR_RETURN(remote::ObjectUrl url, remote::ParseObjectUrl(where));
  RemoteFiles out;
  SATURATE_ASSIGN_OR_RETURN(out.store, remote::OpenObjectStore(url, options));
  std::vector<std::string> listed;
  if (HasWildcards(name)) {
    SATURATE_ASSIGN_OR_RETURN(listed, out.store->List());
  }
  auto names = MatchPattern(name, listed);
  if (!names.ok()) {
    return names.status().code() == StatusCode::kNotFound
               ? Status::NotFound(pattern + ": no such object(s)")
               : names.status().WithContext(where);
  }
  out.names = std::move(*names);
  return out;
}

Result<std::vector<std::string>> ExpandPattern(const std::string& pattern) {
  SATURATE_ASSIGN_OR_RETURN(std::vector<std::string> names, ExpandBraces(pattern));
  std::vector<std::string> files;
  for (const std::string& name : names) {
    glob_t g{};
    const int rc = ::glob(name.c_str(), GLOB_NOSORT, nullptr, &g);
    std::vector<std::string> matched;
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        if (!IsSidecar(g.gl_pathv[i])) matched.emplace_back(g.gl_pathv[i]);
      }
    }
    ::globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) {
      return Status::IOError(pattern + ": cannot list files matching " + name);
    }
    if (matched.empty() && !HasWildcards(name) && names.size() > 1) {
      return Status::NotFound(pattern + ": " + name + ": no such file");
    }
    std::sort(matched.begin(), matched.end());
    files.insert(files.end(), matched.begin(), matched.end());
  }
  if (files.empty()) return Status::NotFound(pattern + ": no such file(s)");
  return files;
}

}  // namespace saturate::formats
