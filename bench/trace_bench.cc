// trace_bench: what one span costs the thread that records it (bar: <= 1 us).
//
//   Disabled/*   recording off: the Enabled() check (and, in a CUDA build, the
//                NVTX push/pop with no tool attached).
//   Enabled/*    recording into a temp run directory while the background
//                writer drains the buffers.
//   WriteOut     the writer's side: formatting and writing one event, per
//                event (this runs on the writer thread, not the caller's).
//
// Iterations are fixed so that a run writes a bounded file (a few tens of MB)
// and the per-thread buffer never reaches its cap (where spans would be
// dropped, which is cheaper and would flatter the numbers).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "saturate/trace/trace.h"

namespace {

namespace trace = saturate::trace;
constexpr int64_t kIterations = 200000;

// A temp run directory, recording while it lives.
class Recording {
 public:
  Recording() {
    std::string templ = (std::filesystem::temp_directory_path() / "trace_bench.XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) std::abort();
    dir_ = templ;
    if (!trace::Start(dir_).ok()) std::abort();
  }
  ~Recording() {
    (void)trace::Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

 private:
  std::string dir_;
};

void BM_Disabled_Phase(benchmark::State& state) {
  (void)trace::Stop();
  for (auto _ : state) {
    trace::Phase p("forward");
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_Disabled_Phase)->Iterations(kIterations * 10);

void BM_Disabled_RecordSpan(benchmark::State& state) {
  (void)trace::Stop();
  for (auto _ : state) {
    trace::RecordSpan("forward", 1, 2);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_Disabled_RecordSpan)->Iterations(kIterations * 10);

void BM_Enabled_Phase(benchmark::State& state) {
  static Recording* recording = nullptr;
  if (state.thread_index() == 0) recording = new Recording;
  for (auto _ : state) {
    trace::Phase p("forward");
    benchmark::ClobberMemory();
  }
  if (state.thread_index() == 0) {
    delete recording;
    recording = nullptr;
  }
}
BENCHMARK(BM_Enabled_Phase)->Iterations(kIterations)->Repetitions(3)->ReportAggregatesOnly();
BENCHMARK(BM_Enabled_Phase)
    ->Iterations(kIterations)
    ->Threads(2)
    ->Repetitions(3)
    ->ReportAggregatesOnly();

// A loader-style span: a name longer than the small-string buffer and 5 args.
void BM_Enabled_RecordSpanWithArgs(benchmark::State& state) {
  Recording recording;
  int64_t i = 0;
  for (auto _ : state) {
    const int64_t t = trace::NowNs();
    trace::RecordSpan("load_batch_with_a_long_name", t, t + 1000, trace::Category::kLoader,
                      {{"batch", i},
                       {"samples", 32},
                       {"read_ns", 1000},
                       {"decode_ns", 2000},
                       {"transform_ns", 3000}});
    ++i;
  }
}
BENCHMARK(BM_Enabled_RecordSpanWithArgs)
    ->Iterations(kIterations)
    ->Repetitions(3)
    ->ReportAggregatesOnly();

void BM_Enabled_Step(benchmark::State& state) {
  Recording recording;
  for (auto _ : state) benchmark::DoNotOptimize(trace::Step());
}
BENCHMARK(BM_Enabled_Step)->Iterations(kIterations);

void BM_NowNs(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(trace::NowNs());
}
BENCHMARK(BM_NowNs);

// The writer's cost per event: record a batch untimed, time the Flush().
void BM_WriteOut(benchmark::State& state) {
  Recording recording;
  constexpr int kBatch = 10000;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < kBatch; ++i) {
      trace::RecordSpan("forward", i, i + 10, trace::Category::kUser, {{"batch", i}});
    }
    state.ResumeTiming();
    if (!trace::Flush().ok()) std::abort();
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_WriteOut)->Iterations(50)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
