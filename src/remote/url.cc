#include "saturate/remote/url.h"

#include <cstdlib>

#include "base/file.h"

namespace saturate::remote {
namespace {

std::string_view Trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string_view::npos) return {};
  const size_t b = s.find_last_not_of(ws);
  return s.substr(a, b - a + 1);
}

std::string_view StripSlashes(std::string_view s) {
  while (!s.empty() && s.front() == '/') s.remove_prefix(1);
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return s;
}

bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return false;
  }
  return b.front() != '.' && b.front() != '-' && b.back() != '.' && b.back() != '-';
}

}  // namespace

std::string ObjectUrl::Key(std::string_view name) const {
  if (prefix.empty()) return std::string(name);
  return prefix + "/" + std::string(name);
}

std::string ObjectUrl::Describe(std::string_view name) const {
  if (scheme == Scheme::kS3) return "s3://" + bucket + "/" + Key(name);
  return http_base + "/" + std::string(name);
}

bool IsRemoteUrl(std::string_view path) {
  return path.starts_with("s3://") || path.starts_with("http://") || path.starts_with("https://");
}

Result<ObjectUrl> ParseObjectUrl(std::string_view url) {
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return Status::InvalidArgument("remote dataset URL '" + std::string(url) +
                                     "' holds a space or control character");
    }
  }
  ObjectUrl out;
  std::string_view rest;
  if (url.starts_with("s3://")) {
    rest = url.substr(5);
    const size_t slash = rest.find('/');
    out.bucket = std::string(rest.substr(0, slash));
    if (out.bucket.empty()) {
      return Status::InvalidArgument("'" + std::string(url) +
                                     "': no bucket (use s3://BUCKET/PREFIX)");
    }
    if (!ValidBucket(out.bucket)) {
      return Status::InvalidArgument("'" + std::string(url) + "': '" + out.bucket +
                                     "' is not a valid S3 bucket name (3-63 of a-z 0-9 . -)");
    }
    if (slash != std::string_view::npos) out.prefix = std::string(StripSlashes(rest.substr(slash)));
    if (out.prefix.find("//") != std::string::npos) {
      return Status::InvalidArgument("'" + std::string(url) + "': empty path segment ('//')");
    }
    return out;
  }
  if (url.starts_with("http://")) {
    out.scheme = Scheme::kHttp;
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    out.scheme = Scheme::kHttps;
    rest = url.substr(8);
  } else {
    return Status::InvalidArgument("'" + std::string(url) +
                                   "': not a remote dataset URL (use s3://, http:// or https://)");
  }
  const size_t slash = rest.find('/');
  const std::string_view host = rest.substr(0, slash);
  if (host.empty() || host.find('@') != std::string_view::npos) {
    return Status::InvalidArgument("'" + std::string(url) +
                                   "': no host (or user info, which is not supported)");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return Status::InvalidArgument("'" + std::string(url) + "': query or fragment not supported");
  }
  std::string_view path = slash == std::string_view::npos ? "" : StripSlashes(rest.substr(slash));
  out.http_base = std::string(url.substr(0, url.size() - rest.size())) + std::string(host);
  if (!path.empty()) out.http_base += "/" + std::string(path);
  return out;
}

std::string S3Config::Describe() const {
  return "region " + region + ", endpoint " + (endpoint.empty() ? "AWS" : endpoint) +
         ", credentials " + (credentials.empty() ? "none (unsigned requests)" : "from " + source);
}

Result<std::map<std::string, std::string>> ParseIniSection(std::string_view text,
                                                           std::string_view section) {
  std::map<std::string, std::string> out;
  bool in = false, found = false;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        if (in) {
          return Status::InvalidArgument("line " + std::to_string(line_no) +
                                         ": section header without ']'");
        }
        in = false;
        continue;
      }
      in = Trim(line.substr(1, line.size() - 2)) == section;
      found = found || in;
      continue;
    }
    if (!in) continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument("line " + std::to_string(line_no) +
                                     ": expected 'key = value'");
    }
    const std::string_view key = Trim(line.substr(0, eq));
    if (key.empty()) {
      return Status::InvalidArgument("line " + std::to_string(line_no) + ": empty key");
    }
    out[std::string(key)] = std::string(Trim(line.substr(eq + 1)));
  }
  if (!found) return Status::NotFound("no section [" + std::string(section) + "]");
  return out;
}

Result<S3Config> ResolveS3Config(const ConfigSources& src, std::string_view endpoint_flag) {
  auto env = [&](const char* name) -> std::string {
    const char* v = src.getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  S3Config c;
  const std::string home = env("HOME");
  const std::string profile_env = env("AWS_PROFILE");
  const std::string profile = profile_env.empty() ? "default" : profile_env;
  const std::string key_id = env("AWS_ACCESS_KEY_ID"), secret = env("AWS_SECRET_ACCESS_KEY");
  if (!key_id.empty() || !secret.empty()) {
    if (key_id.empty() || secret.empty()) {
      return Status::InvalidArgument(
          std::string("AWS credentials: ") +
          (key_id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") + " is set but " +
          (key_id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") + " is not");
    }
    c.credentials = {key_id, secret, env("AWS_SESSION_TOKEN")};
    c.source = "environment";
  } else {
    std::string file = env("AWS_SHARED_CREDENTIALS_FILE");
    if (file.empty() && !home.empty()) file = home + "/.aws/credentials";
    if (!file.empty()) {
      auto text = src.read_file(file);
      if (text.ok()) {
        auto sec = ParseIniSection(*text, profile);
        if (sec.ok()) {
          c.credentials = {(*sec)["aws_access_key_id"], (*sec)["aws_secret_access_key"],
                           (*sec)["aws_session_token"]};
          if (c.credentials.access_key_id.empty() || c.credentials.secret_access_key.empty()) {
            return Status::InvalidArgument("AWS credentials: profile '" + profile + "' in " + file +
                                           " lacks aws_access_key_id or aws_secret_access_key");
          }
          c.source = "profile '" + profile + "' in " + file;
        } else if (sec.status().code() != StatusCode::kNotFound) {
          return sec.status().WithContext(file);
        } else if (!profile_env.empty()) {
          return Status::InvalidArgument("AWS_PROFILE=" + profile + ": no such profile in " + file);
        }
      } else if (!profile_env.empty()) {
        return Status::InvalidArgument("AWS_PROFILE=" + profile + " but " + file +
                                       " cannot be read: " + text.status().message());
      }
    }
  }
  if (std::string r = env("AWS_REGION"); !r.empty()) {
    c.region = r;
  } else if (r = env("AWS_DEFAULT_REGION"); !r.empty()) {
    c.region = r;
  } else {
    std::string file = env("AWS_CONFIG_FILE");
    if (file.empty() && !home.empty()) file = home + "/.aws/config";
    if (!file.empty()) {
      auto text = src.read_file(file);
      if (text.ok()) {
        auto sec = ParseIniSection(*text, profile == "default" ? "default" : "profile " + profile);
        if (sec.ok() && !(*sec)["region"].empty()) c.region = (*sec)["region"];
      }
    }
  }
  if (!endpoint_flag.empty()) {
    c.endpoint = std::string(endpoint_flag);
  } else if (std::string e = env("AWS_ENDPOINT_URL_S3"); !e.empty()) {
    c.endpoint = e;
  } else {
    c.endpoint = env("AWS_ENDPOINT_URL");
  }
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (!c.endpoint.empty() && !c.endpoint.starts_with("http://") &&
      !c.endpoint.starts_with("https://")) {
    return Status::InvalidArgument("S3 endpoint '" + c.endpoint +
                                   "' must start with http:// or https://");
  }
  return c;
}

Result<S3Config> ResolveS3Config(std::string_view endpoint_flag) {
  ConfigSources src{[](const char* n) { return std::getenv(n); },
                    [](const std::string& p) { return ReadFileToString(p); }};
  return ResolveS3Config(src, endpoint_flag);
}

}  // namespace saturate::remote
