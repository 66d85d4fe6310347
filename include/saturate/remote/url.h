// Remote dataset locations: s3://bucket/prefix, http://host[:port]/path and
// https://host[:port]/path, and the AWS configuration used to reach S3.
//
// Both parsers are pure: ParseObjectUrl reads only its argument, and
// ResolveS3Config reads the environment and files only through the
// functions it is given, so tests drive them with a fake environment and a
// temporary HOME. Credentials are held in memory only; nothing here prints
// or writes them (S3Config::Describe() names their source, never the keys).
//
// Thread-safety: values; the functions are reentrant.
#ifndef SATURATE_REMOTE_URL_H_
#define SATURATE_REMOTE_URL_H_

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "saturate/base/status.h"

namespace saturate::remote {

enum class Scheme : uint8_t { kS3, kHttp, kHttps };

// Where the objects of one dataset live. An object `name` (e.g.
// "manifest.json") is the S3 key Key(name) in `bucket`, or the URL
// http_base + "/" + name.
struct ObjectUrl {
  Scheme scheme = Scheme::kS3;
  std::string bucket;     // S3 only; 3..63 characters of [a-z0-9.-]
  std::string prefix;     // S3 key prefix without leading or trailing '/'; may be empty
  std::string http_base;  // http(s) only: "http://host:port/path" without trailing '/'

  std::string Key(std::string_view name) const;
  // "s3://bucket/prefix/name" or "http://host/path/name": for messages.
  std::string Describe(std::string_view name) const;
};

// True when `path` starts with s3://, http:// or https:// (case-sensitive).
bool IsRemoteUrl(std::string_view path);

// InvalidArgument names what is wrong: unknown scheme, no bucket, a bucket
// name S3 does not allow, no host, spaces or control characters.
Result<ObjectUrl> ParseObjectUrl(std::string_view url);

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials only
  bool empty() const { return access_key_id.empty(); }
};

struct S3Config {
  AwsCredentials credentials;  // empty: requests are sent unsigned (public buckets)
  std::string region = "us-east-1";
  std::string endpoint;  // "http://127.0.0.1:8333"; empty: AWS (virtual-hosted URLs)
  std::string source;    // where the credentials came from, e.g. "environment"
  // "region us-east-1, endpoint http://..., credentials from environment":
  // safe to print (no key material).
  std::string Describe() const;
};

// What ResolveS3Config reads: an environment variable (nullptr when unset)
// and a whole file (NotFound when it does not exist).
struct ConfigSources {
  std::function<const char*(const char*)> getenv;
  std::function<Result<std::string>(const std::string&)> read_file;
};

// Resolves, in the order the AWS CLI uses:
//   credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//     else profile AWS_PROFILE (default "default") in AWS_SHARED_CREDENTIALS_FILE
//     (default $HOME/.aws/credentials); else none (unsigned requests).
//   region: AWS_REGION, AWS_DEFAULT_REGION, the profile's `region` in
//     AWS_CONFIG_FILE (default $HOME/.aws/config, section "[profile NAME]" or
//     "[default]"), else us-east-1.
//   endpoint: `endpoint_flag` when not empty, else AWS_ENDPOINT_URL_S3, else
//     AWS_ENDPOINT_URL, else AWS itself.
// InvalidArgument when a named profile (AWS_PROFILE set) is missing, or when
// only one of the key id and the secret is given.
Result<S3Config> ResolveS3Config(const ConfigSources& sources, std::string_view endpoint_flag);
// The same over the process environment and the real files.
Result<S3Config> ResolveS3Config(std::string_view endpoint_flag);

// The keys of section `section` of an INI file as the AWS tools write them
// ("[name]" headers, "key = value" lines, '#' and ';' comments); keys and
// values trimmed. NotFound when the section is absent; InvalidArgument names
// the line number of a malformed line inside the section.
Result<std::map<std::string, std::string>> ParseIniSection(std::string_view text,
                                                           std::string_view section);

}  // namespace saturate::remote

#endif  // SATURATE_REMOTE_URL_H_
