#include "watch/metrics_server.h"

#include <httplib.h>

#include <charconv>
#include <thread>

#include "base/thread_name.h"
#include "watch/prometheus.h"

namespace saturate::watch {

Result<ListenAddress> ParseListenAddress(std::string_view text) {
  ListenAddress a;
  std::string_view port = text;
  const size_t colon = text.rfind(':');
  if (colon != std::string_view::npos) {
    std::string_view host = text.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (!host.empty()) a.host = std::string(host);
    port = text.substr(colon + 1);
  }
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), a.port);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || a.port < 0 ||
      a.port > 65535) {
    return Status::InvalidArgument("bad listen address '" + std::string(text) +
                                   "' (use PORT or ADDR:PORT, e.g. 9400 or 0.0.0.0:9400)");
  }
  return a;
}

class MetricsServer::Impl {
 public:
  httplib::Server server;
  std::thread thread;
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const ListenAddress& address,
                                                            std::function<std::string()> page) {
  auto impl = std::make_unique<Impl>();
  impl->server.Get("/metrics", [page](const httplib::Request&, httplib::Response& res) {
    res.set_content(page(), kPrometheusContentType);
  });
  impl->server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("saturate watch: metrics at /metrics\n", "text/plain");
  });
  int port = address.port;
  if (port == 0) {
    port = impl->server.bind_to_any_port(address.host.c_str());
  } else if (!impl->server.bind_to_port(address.host.c_str(), port)) {
    port = -1;
  }
  if (port < 0) {
    return Status::IOError("cannot listen on " + address.host + ":" + std::to_string(address.port) +
                           " (in use, or not an address here?)");
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    base::NameThisThread("metrics");
    raw->server.listen_after_bind();
  });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl), address.host, port));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl, std::string host, int port)
    : impl_(std::move(impl)), host_(std::move(host)), port_(port) {}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string MetricsServer::url() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_) + "/metrics";
}

}  // namespace saturate::watch
