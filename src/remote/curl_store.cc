// The libcurl ObjectStore: S3 (path-style requests to a custom endpoint,
// virtual-hosted ones to AWS, signed with CURLOPT_AWS_SIGV4) and plain
// HTTP(S) GETs. One easy handle per request from a pool, so connections are
// reused across requests and threads.
#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "base/file.h"
#include "remote/retry.h"
#include "saturate/remote/object_store.h"

namespace saturate::remote {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t Nanos(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// S3 URI encoding: unreserved characters kept, '/' kept in keys.
std::string UriEncode(std::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// The text between <tag> and </tag>, from position *pos on; advances *pos.
bool XmlNext(std::string_view xml, std::string_view tag, size_t* pos, std::string* out) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  const size_t a = xml.find(open, *pos);
  if (a == std::string_view::npos) return false;
  const size_t b = xml.find(close, a + open.size());
  if (b == std::string_view::npos) return false;
  *out = std::string(xml.substr(a + open.size(), b - a - open.size()));
  *pos = b + close.size();
  return true;
}

std::string XmlValue(std::string_view xml, std::string_view tag) {
  size_t pos = 0;
  std::string out;
  return XmlNext(xml, tag, &pos, &out) ? out : std::string();
}

struct Request {
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers;
  std::span<const std::byte> body;  // sent as the request body (hashed by SigV4)
  bool has_body = false;
  // GET into a caller buffer: bytes [skip, skip + out.size()) of the body.
  std::span<std::byte> out;
  bool into_span = false;
  uint64_t skip = 0;  // a 200 answer to a range request: bytes to drop first
};

struct Response {
  long status = 0;
  std::string body;  // when not into_span (or an error body, capped)
  std::string etag, last_modified;
  uint64_t written = 0;
  bool overflow = false;
};

struct WriteCtx {
  Request* req;
  Response* resp;
  CURL* curl;
};

size_t OnWrite(char* data, size_t size, size_t n, void* user) {
  auto* c = static_cast<WriteCtx*>(user);
  const size_t bytes = size * n;
  long status = 0;
  curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
  if (!c->req->into_span || status >= 300) {
    if (c->resp->body.size() < (c->req->into_span ? 4096u : SIZE_MAX))
      c->resp->body.append(data, bytes);
    return bytes;
  }
  size_t off = 0;
  if (status == 200 && c->req->skip > 0) {  // the server ignored Range
    const size_t drop = std::min<uint64_t>(c->req->skip, bytes);
    c->req->skip -= drop;
    off = drop;
  }
  const size_t room = c->req->out.size() - c->resp->written;
  const size_t take = std::min(room, bytes - off);
  std::memcpy(c->req->out.data() + c->resp->written, data + off, take);
  c->resp->written += take;
  if (take < bytes - off) {
    if (status == 206) {
      c->resp->overflow = true;
      return 0;  // more than asked for: abort
    }
    // 200 (whole object): drop the tail.
  }
  return bytes;
}

// The value of header `name` ("etag:") in `line`, trimmed; false if another header.
bool HeaderValue(std::string_view line, std::string_view name, std::string* out) {
  if (line.size() <= name.size() || strncasecmp(line.data(), name.data(), name.size()) != 0) {
    return false;
  }
  line.remove_prefix(name.size());
  while (!line.empty() && (line.front() == ' ')) line.remove_prefix(1);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n' || line.back() == ' ')) {
    line.remove_suffix(1);
  }
  *out = std::string(line);
  return true;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* resp = static_cast<Response*>(user);
  const std::string_view line(data, size * n);
  if (!HeaderValue(line, "etag:", &resp->etag)) {
    HeaderValue(line, "last-modified:", &resp->last_modified);
  }
  return size * n;
}

Transport Classify(CURLcode code) {
  switch (code) {
    case CURLE_OK:
      return Transport::kOk;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return Transport::kTransient;
    default:
      return Transport::kPermanent;
  }
}

class CurlStore final : public ObjectStore {
 public:
  CurlStore(ObjectUrl url, StoreOptions options, S3Config config)
      : ObjectStore(std::move(url)), options_(std::move(options)), config_(std::move(config)) {
    if (!config_.credentials.empty()) {
      sigv4_ = "aws:amz:" + config_.region + ":s3";
      userpwd_ = config_.credentials.access_key_id + ":" + config_.credentials.secret_access_key;
    }
  }
  ~CurlStore() override {
    for (CURL* c : pool_) curl_easy_cleanup(c);
  }

  Result<std::string> Get(std::string_view name) override {
    Request req;
    req.url = ObjectAddress(name);
    Response resp;
    SATURATE_RETURN_IF_ERROR(Perform(&req, &resp, name));
    counters_.bytes_fetched += resp.body.size();
    return std::move(resp.body);
  }

  Result<ObjectStat> Stat(std::string_view name) override {
    Request req;
    req.method = "HEAD";
    req.url = ObjectAddress(name);
    Response resp;
    curl_off_t length = -1;
    SATURATE_RETURN_IF_ERROR(Perform(&req, &resp, name, &length));
    if (length < 0) return Status::IOError(Describe(name) + ": HEAD answered without a length");
    return ObjectStat{static_cast<uint64_t>(length),
                      resp.etag.empty() ? resp.last_modified : resp.etag};
  }

  Status GetRange(std::string_view name, uint64_t offset, std::span<std::byte> out) override {
    if (out.empty()) return Status::OK();
    Request req;
    req.url = ObjectAddress(name);
    req.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                          std::to_string(offset + out.size() - 1));
    req.out = out;
    req.into_span = true;
    Response resp;
    SATURATE_RETURN_IF_ERROR(Perform(&req, &resp, name));
    counters_.bytes_fetched += resp.written;
    if (resp.written != out.size()) {
      return Status::Corruption(Describe(name) + ": range " + std::to_string(offset) + "+" +
                                std::to_string(out.size()) + " returned " +
                                std::to_string(resp.written) + " bytes (object shorter?)");
    }
    return Status::OK();
  }

  Status Put(std::string_view name, std::span<const std::byte> data) override {
    SATURATE_RETURN_IF_ERROR(Writable());
    if (data.size() > options_.multipart_threshold_bytes) {
      return Multipart(name, data.size(),
                       [&](uint64_t off, uint64_t n, std::vector<std::byte>*)
                           -> Result<std::span<const std::byte>> { return data.subspan(off, n); });
    }
    Request req;
    req.method = "PUT";
    req.url = ObjectAddress(name);
    req.body = data;
    req.has_body = true;
    Response resp;
    SATURATE_RETURN_IF_ERROR(Perform(&req, &resp, name));
    counters_.bytes_uploaded += data.size();
    return Status::OK();
  }

  Status PutFile(std::string_view name, const std::string& path) override {
    SATURATE_RETURN_IF_ERROR(Writable());
    SATURATE_ASSIGN_OR_RETURN(auto file, ReadOnlyFile::Open(path, /*allow_mmap=*/true));
    std::vector<std::byte> scratch;
    if (file->size() <= options_.multipart_threshold_bytes) {
      SATURATE_ASSIGN_OR_RETURN(auto all, file->Read(0, file->size(), &scratch));
      return Put(name, all);
    }
    return Multipart(name, file->size(),
                     [&](uint64_t off, uint64_t n, std::vector<std::byte>* buf) {
                       return file->Read(off, n, buf);
                     });
  }

 private:
  // Multipart upload of `size` bytes that `read(offset, bytes, scratch)`
  // yields part by part: create, upload parts, complete (abort on failure).
  using PartReader = std::function<Result<std::span<const std::byte>>(uint64_t, uint64_t,
                                                                      std::vector<std::byte>*)>;
  Status Multipart(std::string_view name, uint64_t size, const PartReader& read) {
    std::vector<std::byte> scratch;
    Request create;
    create.method = "POST";
    create.url = ObjectAddress(name) + "?uploads=";
    create.has_body = true;
    Response created;
    SATURATE_RETURN_IF_ERROR(Perform(&create, &created, name));
    const std::string upload_id = XmlValue(created.body, "UploadId");
    if (upload_id.empty()) {
      return Status::IOError(Describe(name) + ": multipart upload created without an UploadId");
    }
    const std::string query = "uploadId=" + UriEncode(upload_id, false);
    std::string complete = "<CompleteMultipartUpload>";
    Status st;
    const uint64_t part = std::max<uint64_t>(options_.part_bytes, 5u << 20);
    int number = 1;
    for (uint64_t off = 0; off < size && st.ok(); off += part, ++number) {
      auto bytes = read(off, std::min(part, size - off), &scratch);
      if (!bytes.ok()) {
        st = bytes.status();
        break;
      }
      Request up;
      up.method = "PUT";
      up.url = ObjectAddress(name) + "?partNumber=" + std::to_string(number) + "&" + query;
      up.body = *bytes;
      up.has_body = true;
      Response r;
      st = Perform(&up, &r, name);
      if (st.ok()) {
        counters_.bytes_uploaded += bytes->size();
        complete += "<Part><PartNumber>" + std::to_string(number) + "</PartNumber><ETag>" + r.etag +
                    "</ETag></Part>";
      }
    }
    complete += "</CompleteMultipartUpload>";
    if (st.ok()) {
      Request done;
      done.method = "POST";
      done.url = ObjectAddress(name) + "?" + query;
      done.body = std::as_bytes(std::span(complete.data(), complete.size()));
      done.has_body = true;
      Response r;
      st = Perform(&done, &r, name);
      // S3 may answer 200 with an <Error> body.
      if (st.ok() && r.body.find("<Error>") != std::string::npos) {
        st = Status::IOError(Describe(name) + ": completing the multipart upload failed: " +
                             XmlValue(r.body, "Code") + " " + XmlValue(r.body, "Message"));
      }
    }
    if (!st.ok()) {
      Request abort;
      abort.method = "DELETE";
      abort.url = ObjectAddress(name) + "?" + query;
      Response r;
      (void)Perform(&abort, &r, name);
    }
    return st;
  }

 public:
  Status Delete(std::string_view name) override {
    SATURATE_RETURN_IF_ERROR(Writable());
    Request req;
    req.method = "DELETE";
    req.url = ObjectAddress(name);
    Response resp;
    Status s = Perform(&req, &resp, name);
    return s.code() == StatusCode::kNotFound ? Status::OK() : s;
  }

  Result<std::vector<std::string>> List() override {
    SATURATE_RETURN_IF_ERROR(Writable());
    std::vector<std::string> names;
    const std::string prefix = url().prefix.empty() ? "" : url().prefix + "/";
    std::string token;
    while (true) {
      Request req;
      req.url = BucketAddress() + "?" +
                (token.empty() ? "" : "continuation-token=" + UriEncode(token, false) + "&") +
                "list-type=2&prefix=" + UriEncode(prefix, false);
      Response resp;
      SATURATE_RETURN_IF_ERROR(Perform(&req, &resp, ""));
      size_t pos = 0;
      std::string key;
      while (XmlNext(resp.body, "Key", &pos, &key)) {
        if (key.starts_with(prefix)) names.push_back(key.substr(prefix.size()));
      }
      if (XmlValue(resp.body, "IsTruncated") != "true") break;
      token = XmlValue(resp.body, "NextContinuationToken");
      if (token.empty()) break;
    }
    return names;
  }

 private:
  Status Writable() const {
    if (url().scheme != Scheme::kS3) {
      return Status::Unimplemented(url().http_base +
                                   ": HTTP(S) locations are read-only (use s3://)");
    }
    return Status::OK();
  }

  std::string BucketAddress() const {
    if (config_.endpoint.empty()) {
      return "https://" + url().bucket + ".s3." + config_.region + ".amazonaws.com";
    }
    return config_.endpoint + "/" + url().bucket;
  }

  std::string ObjectAddress(std::string_view name) const {
    if (url().scheme != Scheme::kS3) return url().http_base + "/" + UriEncode(name, true);
    return BucketAddress() + "/" + UriEncode(url().Key(name), true);
  }

  CURL* Acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!pool_.empty()) {
        CURL* c = pool_.back();
        pool_.pop_back();
        curl_easy_reset(c);
        return c;
      }
    }
    return curl_easy_init();
  }
  void Release(CURL* c) {
    std::lock_guard<std::mutex> lock(mu_);
    pool_.push_back(c);
  }

  // One try. Returns the transport outcome; fills resp.
  Transport TryOnce(CURL* c, Request* req, Response* resp, std::string* error) {
    char errbuf[CURL_ERROR_SIZE] = {0};
    WriteCtx ctx{req, resp, c};
    curl_easy_setopt(c, CURLOPT_URL, req->url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options_.stall_timeout_s));
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnWrite);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &ctx);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, resp);
    // Cancel() aborts a transfer in flight (curl calls this about once a second, and on data).
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, static_cast<const ObjectStore*>(this));
    curl_slist* headers = nullptr;
    for (const std::string& h : req->headers) headers = curl_slist_append(headers, h.c_str());
    // No "Expect:" override: curl 7.88 signs the empty header it then omits.
    if (req->has_body) {
      // The body as POST fields, the method overridden. curl 7.88's SigV4
      // hash of POST fields is refused by S3 servers, so the payload is
      // declared unsigned (allowed by S3; TLS protects it in transit).
      headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
      headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req->body.size()));
      curl_easy_setopt(c, CURLOPT_POSTFIELDS,
                       req->body.empty() ? "" : reinterpret_cast<const char*>(req->body.data()));
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method.c_str());
    } else if (req->method == "DELETE") {
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else if (req->method == "HEAD") {
      curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    }
    if (!config_.credentials.session_token.empty()) {
      token_header_ = "x-amz-security-token: " + config_.credentials.session_token;
      headers = curl_slist_append(headers, token_header_.c_str());
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    if (url().scheme == Scheme::kS3 && !sigv4_.empty()) {
      curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4_.c_str());
      curl_easy_setopt(c, CURLOPT_USERPWD, userpwd_.c_str());
    }
    ++counters_.in_flight;
    const CURLcode code = curl_easy_perform(c);
    --counters_.in_flight;
    ++counters_.requests;
    curl_slist_free_all(headers);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    if (code != CURLE_OK) {
      *error =
          std::string(curl_easy_strerror(code)) + (errbuf[0] ? std::string(": ") + errbuf : "");
      if (resp->overflow) return Transport::kPermanent;
    }
    return Classify(code);
  }

  Status HttpError(std::string_view name, const Response& resp) const {
    const std::string what =
        name.empty() ? (url().scheme == Scheme::kS3 ? "s3://" + url().bucket : url().http_base)
                     : Describe(name);
    std::string detail = "HTTP " + std::to_string(resp.status);
    const std::string code = XmlValue(resp.body, "Code");
    if (!code.empty()) detail += " " + code;
    const std::string msg = XmlValue(resp.body, "Message");
    if (!msg.empty()) detail += ": " + msg;
    if (resp.status == 404) {
      return Status::NotFound(
          what + ": not found (" + detail + ")" +
          (code == "NoSuchBucket" ? "; bucket '" + url().bucket + "' does not exist" : ""));
    }
    if (resp.status == 401 || resp.status == 403) {
      return Status::IOError(what + ": access denied (" + detail + "); check the credentials (" +
                             config_.Describe() + ")");
    }
    return Status::IOError(what + ": " + detail);
  }

  static int OnProgress(void* store, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<const ObjectStore*>(store)->cancelled() ? 1 : 0;
  }

  // The backoff wait, in slices, so that Cancel() ends it promptly.
  void SleepUnlessCancelled(uint64_t delay_ns) const {
    constexpr uint64_t kSliceNs = 50'000'000;
    for (uint64_t slept = 0; slept < delay_ns && !cancelled(); slept += kSliceNs) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(kSliceNs, delay_ns - slept)));
    }
  }

  // `length`, when given: the Content-Length of the answer (-1 if none).
  Status Perform(Request* req, Response* resp, std::string_view name,
                 curl_off_t* length = nullptr) {
    CURL* c = Acquire();
    if (c == nullptr) return Status::Internal("curl_easy_init failed");
    const auto start = Clock::now();
    thread_local std::mt19937_64 rng{std::random_device{}()};
    int attempts = 0;
    Status result;
    const uint64_t skip = req->skip;
    while (true) {
      if (cancelled()) {
        result = Status::Cancelled(Describe(name) + ": cancelled (the reader is closing)");
        break;
      }
      *resp = Response{};
      req->skip = skip;
      std::string error;
      const Transport t = TryOnce(c, req, resp, &error);
      ++attempts;
      if (t == Transport::kOk && resp->status >= 200 && resp->status < 300) {
        if (length != nullptr) curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, length);
        result = Status::OK();
        break;
      }
      if (ShouldRetry(t, resp->status)) {
        const uint64_t delay = BackoffDelayNs(options_.retry, attempts - 1, rng());
        if (MayRetry(options_.retry, attempts, Nanos(start, Clock::now()), delay)) {
          ++counters_.retries;
          SleepUnlessCancelled(delay);
          continue;
        }
      }
      const std::string what = name.empty() ? "s3://" + url().bucket : Describe(name);
      if (t != Transport::kOk) {
        result = Status::IOError(what + ": " + error + " (after " + std::to_string(attempts) +
                                 " attempt(s) over " +
                                 std::to_string(Nanos(start, Clock::now()) / 1'000'000) + " ms)");
      } else {
        result = HttpError(name, *resp);
        if (attempts > 1) {
          result = result.WithContext("after " + std::to_string(attempts) + " attempts");
        }
      }
      ++counters_.errors;
      break;
    }
    counters_.request_ns += Nanos(start, Clock::now());
    Release(c);
    return result;
  }

  const StoreOptions options_;
  const S3Config config_;
  std::string sigv4_, userpwd_;
  static thread_local std::string token_header_;
  std::mutex mu_;
  std::vector<CURL*> pool_;
};

thread_local std::string CurlStore::token_header_;

}  // namespace

Result<std::unique_ptr<ObjectStore>> OpenObjectStore(const ObjectUrl& url,
                                                     const StoreOptions& options) {
  static std::once_flag once;
  static CURLcode init = CURLE_OK;
  std::call_once(once, [] { init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (init != CURLE_OK) return Status::Internal("curl_global_init failed");
  S3Config config;
  if (url.scheme == Scheme::kS3) {
    SATURATE_ASSIGN_OR_RETURN(config, ResolveS3Config(options.endpoint));
  }
  return std::unique_ptr<ObjectStore>(new CurlStore(url, options, std::move(config)));
}

}  // namespace saturate::remote
