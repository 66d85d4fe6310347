// saturate devices: which GPUs this build can use, or why none.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "saturate/device/device.h"

namespace saturate::cli {

void RegisterDevices(CLI::App& app, int* exit_code) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd =
      app.add_subcommand("devices", "List the GPUs this build can use, or say why none");
  cmd->add_flag("--json", *json, "Machine-readable output");
  cmd->callback([exit_code, json] {
    device::DeviceReport r = device::ProbeDevices();
    if (*json) {
      nlohmann::json gpus = nlohmann::json::array();
      for (const auto& g : r.gpus) {
        gpus.push_back({{"index", g.index},
                        {"name", g.name},
                        {"memory_bytes", g.memory_bytes},
                        {"compute_capability",
                         std::to_string(g.compute_major) + "." + std::to_string(g.compute_minor)}});
      }
      std::cout << nlohmann::json{{"built_with_cuda", r.built_with_cuda},
                                  {"cpu_cores", r.cpu_cores},
                                  {"gpus", gpus},
                                  {"no_gpu_reason", r.no_gpu_reason}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << "cpu: " << r.cpu_cores << " cores\n";
      for (const auto& g : r.gpus) {
        std::cout << "gpu " << g.index << ": " << g.name << ", " << FormatBytes(g.memory_bytes)
                  << ", compute " << g.compute_major << "." << g.compute_minor << "\n";
      }
      if (r.gpus.empty()) std::cout << "gpu: none (" << r.no_gpu_reason << ")\n";
    }
    *exit_code = kExitOk;
  });
}

}  // namespace saturate::cli
