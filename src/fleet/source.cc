#include "fleet/source.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "fleet/text.h"

namespace saturate::fleet {
namespace {

using text::Fmt;

using nlohmann::json;

struct Url {
  std::string origin;  // scheme://host:port
  std::string prefix;  // path before /api/v1, no trailing slash
};

Result<Url> ParseUrl(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--prometheus " + text + ": " + why);
  };
  const size_t scheme_end = text.find("://");
  if (scheme_end == std::string::npos) return bad("expected http://host:port");
  const std::string scheme = text.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") return bad("the scheme must be http or https");
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
  if (scheme == "https") return bad("this build has no TLS support; use an http:// URL");
#endif
  const size_t host_start = scheme_end + 3;
  const size_t path_start = text.find('/', host_start);
  Url url;
  url.origin = text.substr(0, path_start);
  if (url.origin.size() == host_start) return bad("no host");
  if (path_start != std::string::npos) url.prefix = text.substr(path_start);
  while (!url.prefix.empty() && url.prefix.back() == '/') url.prefix.pop_back();
  return url;
}

double ParseValue(const json& v) {
  // Prometheus sends sample values as strings ("NaN", "+Inf" included).
  return v.is_string() ? std::strtod(v.get<std::string>().c_str(), nullptr) : v.get<double>();
}

std::string Why(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "could not connect";
    case httplib::Error::SSLConnection:
      return "the TLS handshake failed";
    case httplib::Error::SSLServerVerification:
      return "its TLS certificate did not verify";
    default:
      return httplib::to_string(e);
  }
}

class Client {
 public:
  Client(const Url& url, double timeout_s, std::string shown)
      : url_(url), client_(url.origin), shown_(std::move(shown)), timeout_s_(timeout_s) {
    const auto timeout = std::chrono::milliseconds(long(timeout_s * 1000));
    client_.set_connection_timeout(timeout);
    client_.set_read_timeout(timeout);
  }

  Result<std::vector<Series>> QueryRange(const std::string& query, double start_s, double end_s,
                                         double step_s, std::vector<std::string>* warnings) {
    httplib::Params params = {{"query", query},
                              {"start", Fmt("%.3f", start_s)},
                              {"end", Fmt("%.3f", end_s)},
                              {"step", Fmt("%g", step_s)}};
    httplib::Result res = client_.Get(url_.prefix + "/api/v1/query_range", params, {});
    if (!res) {
      const httplib::Error e = res.error();
      if (e == httplib::Error::Read || e == httplib::Error::ConnectionTimeout) {
        return Status::Unavailable("Prometheus at " + shown_ + " did not answer within " +
                                   Fmt("%g", timeout_s_) + " s (--timeout) for `" + query + "`");
      }
      return Status::Unavailable("cannot reach Prometheus at " + shown_ + ": " + Why(e) +
                                 " (is it running, and is --prometheus its address?)");
    }
    const std::string type = res->get_header_value("Content-Type");
    if (type.find("json") == std::string::npos) {
      return Status::Unavailable("the answer from " + shown_ + " is not Prometheus' API (HTTP " +
                                 std::to_string(res->status) + ", " +
                                 (type.empty() ? "no content type" : type) +
                                 "): is --prometheus the server's address, not Grafana's or an "
                                 "exporter's?");
    }
    return ParseMatrix(res->body, query, warnings);
  }

 private:
  Url url_;
  httplib::Client client_;
  std::string shown_;
  double timeout_s_;
};

// A PromQL string literal's body: backslashes and double quotes escaped.
std::string PromString(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

double AutoStep(double since_s) { return std::max(15.0, std::ceil(since_s / 1440)); }

std::string Selector(std::string_view metric, std::string_view extra) {
  std::string out(metric);
  if (!extra.empty()) out += "{" + std::string(extra) + "}";
  return out;
}

Result<std::vector<Series>> ParseMatrix(std::string_view body, std::string_view query,
                                        std::vector<std::string>* warnings) {
  const std::string q(query);
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption("Prometheus' answer to `" + q + "` is not JSON");
  }
  if (j.value("status", "") != "success") {
    return Status::InvalidArgument("Prometheus rejected `" + q + "`: " +
                                   j.value("errorType", "error") + ": " + j.value("error", "?"));
  }
  if (j.contains("warnings") && warnings != nullptr) {
    for (const json& w : j["warnings"]) {
      warnings->push_back("Prometheus warned about `" + q +
                          "`: " + (w.is_string() ? w.get<std::string>() : w.dump()));
    }
  }
  const json& data = j["data"];
  if (!data.is_object() || data.value("resultType", "") != "matrix" || !data["result"].is_array()) {
    return Status::Corruption("Prometheus' answer to `" + q + "` holds no matrix");
  }
  std::vector<Series> out;
  try {
    for (const json& r : data["result"]) {
      Series s;
      for (const auto& [k, v] : r.at("metric").items()) s.labels[k] = v.get<std::string>();
      for (const json& p : r.at("values")) {
        const double v = ParseValue(p.at(1));
        if (std::isfinite(v)) s.points.push_back({p.at(0).get<double>(), v});
      }
      out.push_back(std::move(s));
    }
  } catch (const json::exception& e) {
    return Status::Corruption("Prometheus' answer to `" + q + "`: " + e.what());
  }
  return out;
}

Result<FleetInput> Fetch(const SourceOptions& o) {
  SATURATE_ASSIGN_OR_RETURN(Url url, ParseUrl(o.url));
  if (!(o.since_s > 0)) return Status::InvalidArgument("--since must be longer than 0");
  if (o.step_s < 0) return Status::InvalidArgument("--step must be positive");
  FleetInput in;
  in.end_s = o.end_s > 0 ? o.end_s
                         : double(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count()) /
                               1000;
  in.start_s = in.end_s - o.since_s;
  in.step_s = o.step_s > 0 ? o.step_s : AutoStep(o.since_s);
  if (o.since_s / in.step_s > 11000) {
    return Status::InvalidArgument("--since " + Fmt("%g", o.since_s) + " s at --step " +
                                   Fmt("%g", in.step_s) +
                                   " s is over Prometheus' 11,000 points "
                                   "per series: give a longer --step");
  }
  Client client(url, o.timeout_s, o.url);
  auto range = [&](const std::string& q) {
    return client.QueryRange(q, in.start_s, in.end_s, in.step_s, &in.notes);
  };
  const std::string util_q = Selector("DCGM_FI_DEV_GPU_UTIL", o.selector);
  SATURATE_ASSIGN_OR_RETURN(in.util, range(util_q));
  if (in.util.empty()) {
    // dcgm-exporter set up with profiling metrics only: the graphics engine's
    // active ratio is the utilization (0..1).
    const std::string prof_q = Selector("DCGM_FI_PROF_GR_ENGINE_ACTIVE", o.selector) + " * 100";
    SATURATE_ASSIGN_OR_RETURN(in.util, range(prof_q));
    if (!in.util.empty()) {
      in.notes.push_back("no `" + util_q + "` series: utilization is `" + prof_q + "`");
    }
  }
  if (in.util.empty()) {
    return Status::NotFound("no `" + util_q + "` (nor DCGM_FI_PROF_GR_ENGINE_ACTIVE) series at " +
                            o.url + " in the last " + Fmt("%g", o.since_s / 3600) +
                            " h: does this Prometheus scrape saturate watch --prometheus or "
                            "dcgm-exporter (docs/fleet.md)?");
  }
  const std::string used_q = Selector("DCGM_FI_DEV_FB_USED", o.selector);
  SATURATE_ASSIGN_OR_RETURN(in.mem_used, range(used_q));
  SATURATE_ASSIGN_OR_RETURN(in.mem_free, range(Selector("DCGM_FI_DEV_FB_FREE", o.selector)));
  if (in.mem_used.empty()) {
    in.notes.push_back("no `" + used_q + "` series: memory headroom was not assessed");
  }
  const std::string up_q = "up{job=~\"" + PromString(o.scrape_job) + "\"}";
  SATURATE_ASSIGN_OR_RETURN(in.up, range(up_q));
  if (in.up.empty()) {
    in.notes.push_back("no `" + up_q +
                       "` series: exporter downtime is not known (--scrape-job names the "
                       "scrape jobs of the exporters)");
  }
  return in;
}

}  // namespace saturate::fleet
