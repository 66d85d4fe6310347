// MetricsServer: a small HTTP server (cpp-httplib) that serves a Prometheus
// page at /metrics, produced on demand by a callback. Binds 127.0.0.1 unless
// told otherwise: metrics say what a machine is doing, so exposing them is
// the user's decision.
//
// Ownership: owns its listening thread; destruction stops and joins it.
// Thread-safety: `page` is called on the server's threads, concurrently with
// the caller; it must be thread-safe (Watcher::PrometheusText is).
#ifndef SATURATE_WATCH_METRICS_SERVER_H_
#define SATURATE_WATCH_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "saturate/base/status.h"

namespace saturate::watch {

struct ListenAddress {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
};

// "9400", ":9400", "0.0.0.0:9400", "[::1]:9400" -> address (host 127.0.0.1
// when none is given).
Result<ListenAddress> ParseListenAddress(std::string_view text);

class MetricsServer {
 public:
  static Result<std::unique_ptr<MetricsServer>> Start(const ListenAddress& address,
                                                      std::function<std::string()> page);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }  // the bound port (useful with port 0)
  std::string url() const;            // "http://127.0.0.1:9400/metrics"

  class Impl;

 private:
  MetricsServer(std::unique_ptr<Impl> impl, std::string host, int port);
  std::unique_ptr<Impl> impl_;
  std::string host_;
  int port_ = 0;
};

}  // namespace saturate::watch

#endif  // SATURATE_WATCH_METRICS_SERVER_H_
