// saturate: keep the GPU busy while a model trains.
// The command is a thin layer: each subcommand lives in cmd_<name>.cc.
#include <CLI/CLI.hpp>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{
      "saturate - keep the GPU busy while a model trains.\n"
      "Packs datasets into a fast, checksummed, memory-mapped record format, feeds them to\n"
      "training, watches GPUs and host while a model trains, and explains why the GPU idles."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "saturate 0.1.0");
  int exit_code = saturate::cli::kExitOk;
  saturate::cli::RegisterPack(app, &exit_code);
  saturate::cli::RegisterVerify(app, &exit_code);
  saturate::cli::RegisterInspect(app, &exit_code);
  saturate::cli::RegisterDevices(app, &exit_code);
  saturate::cli::RegisterBench(app, &exit_code);
  saturate::cli::RegisterWatch(app, &exit_code);
  saturate::cli::RegisterTrace(app, &exit_code);
  saturate::cli::RegisterDoctor(app, &exit_code);
  saturate::cli::RegisterTune(app, &exit_code);
  saturate::cli::RegisterRun(app, &exit_code);
  saturate::cli::RegisterFleet(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return saturate::cli::kExitUsage;
  }
  return exit_code;
}
