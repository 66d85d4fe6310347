// The JPEG decode split of a GPU-fed loader (a DeviceLoader's "loader_decode"
// records, docs/gpu.md) through doctor: the features that read it, the
// input_pipeline fix that suggests decode="auto", and the report's lines.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "doctor/analysis.h"
#include "doctor/report.h"
#include "doctor/testing/report_fixture.h"
#include "doctor/testing/run_builder.h"

namespace saturate::doctor {
namespace {

using testing::RunBuilder;

// A loader record of `steps` batches of 256 decoded at `decode_ms` a sample.
std::map<std::string, int64_t> LoaderRecord(int steps, int64_t threads, double decode_ms) {
  const int64_t samples = steps * 256;
  return {{"batch_size", 256},
          {"threads", threads},
          {"prefetch", 2},
          {"samples", samples},
          {"read_ns", std::llround(0.2e6 * samples)},
          {"decode_ns", std::llround(decode_ms * 1e6 * samples)},
          {"transform_ns", 0}};
}

// A "loader_decode" record as DeviceLoader writes it (docs/trace.md).
std::map<std::string, int64_t> DecodeRecord(int64_t mode, bool decoder, int64_t cpu, int64_t gpu,
                                            int64_t permille, int64_t cpu_rate = 0,
                                            int64_t gpu_rate = 0, int64_t gpu_ns = 0) {
  return {{"decoder_id", 0},          {"device", 0},
          {"decode_mode", mode},      {"gpu_decoder", decoder ? 1 : 0},
          {"cpu_decoded", cpu},       {"gpu_decoded", gpu},
          {"gpu_decode_ns", gpu_ns},  {"gpu_decode_fallbacks", 0},
          {"gpu_permille", permille}, {"cpu_per_s_per_thread", cpu_rate},
          {"gpu_per_s", gpu_rate}};
}

// Starved by a loader whose one thread decodes at 1.8 ms a sample (as
// rules_test's StarvedByTheLoader): input_pipeline is the cause. With
// `decode`, a device loader's "loader_decode" record.
doctor::Run Starved(bool gpu, std::optional<std::map<std::string, int64_t>> decode = {}) {
  RunBuilder b;
  if (gpu) b.Gpus(1);
  b.Steps(40, {{"data_wait", 0.312, SpanKind::kLoader}, {"forward", 0.1}, {"backward", 0.1}})
      .Loader(LoaderRecord(40, /*threads=*/1, /*decode_ms=*/1.8));
  if (decode) b.Counter("loader_decode", *decode);
  b.Samples([&b, gpu](double t, SamplePoint& s) {
    s.cpu_busy_pct = 20;
    s.tree_cpu_pct = 200;
    if (gpu) s.gpus[0].util_pct = b.InPhase(t, "data_wait") ? 0 : 97;
  });
  return b.Build();
}

const Finding* Find(const std::vector<Finding>& findings, const std::string& cause) {
  for (const Finding& x : findings) {
    if (x.cause == cause) return &x;
  }
  return nullptr;
}

const Evidence* FindEvidence(const Finding& x, const std::string& key) {
  for (const Evidence& e : x.evidence) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

// ---- features -------------------------------------------------------------------

TEST(DecodeSplitFeatures, ReadTheRecordAndAutosRates) {
  const Features f =
      ComputeFeatures(Starved(true, DecodeRecord(2, true, 3840, 6400, 625, 310, 4100)));
  EXPECT_EQ(f.decode_mode, "auto");
  EXPECT_TRUE(f.decode_gpu_decoder);
  EXPECT_EQ(f.decode_cpu_images, 3840);
  EXPECT_EQ(f.decode_gpu_images, 6400);
  EXPECT_DOUBLE_EQ(*f.decode_gpu_share, 0.625);
  EXPECT_DOUBLE_EQ(*f.decode_cpu_per_s_per_thread, 310);
  EXPECT_DOUBLE_EQ(*f.decode_gpu_per_s, 4100);
  EXPECT_NEAR(*f.loader_decode_ns_per_sample, 1.8e6, 1);
  const nlohmann::json j = f.ToJson();
  EXPECT_EQ(j["decode"]["mode"], "auto");
  EXPECT_EQ(j["decode"]["gpu_images"], 6400);
  EXPECT_DOUBLE_EQ(j["decode"]["gpu_share"].get<double>(), 0.625);
}

TEST(DecodeSplitFeatures, RatesFromTheCountersWhereAutoMeasuredNone) {
  // decode="cpu": one thread's rate from the loader's decode time per sample.
  Features f = ComputeFeatures(Starved(true, DecodeRecord(0, false, 10240, 0, 0)));
  EXPECT_EQ(f.decode_mode, "cpu");
  EXPECT_NEAR(*f.decode_cpu_per_s_per_thread, 1 / 1.8e-3, 0.01);
  EXPECT_FALSE(f.decode_gpu_per_s.has_value());
  // decode="gpu": the GPU's from its images and decode time.
  f = ComputeFeatures(Starved(true, DecodeRecord(1, true, 0, 10000, 1000, 0, 0, 2'000'000'000)));
  EXPECT_EQ(f.decode_mode, "gpu");
  EXPECT_DOUBLE_EQ(*f.decode_gpu_per_s, 5000);
  EXPECT_FALSE(f.decode_cpu_per_s_per_thread.has_value());
}

TEST(DecodeSplitFeatures, NoneWithoutADeviceLoaderOrForAnUnknownMode) {
  Features f = ComputeFeatures(Starved(true));
  EXPECT_EQ(f.decode_mode, "");
  EXPECT_FALSE(f.ToJson().contains("decode"));
  EXPECT_EQ(ComputeFeatures(Starved(true, DecodeRecord(7, true, 1, 1, 500))).decode_mode, "");
}

// ---- the input_pipeline fix ---------------------------------------------------------

TEST(DecodeSplitRules, CpuDecodeFeedingAGpuSuggestsAuto) {
  const Analysis a = Analyze(Starved(true, DecodeRecord(0, false, 10240, 0, 0)));
  const Finding* x = Find(a.findings, "input_pipeline");
  ASSERT_NE(x, nullptr);
  EXPECT_NE(x->fix.find("decodes its images on the CPU (decode=\"cpu\")"), std::string::npos)
      << x->fix;
  EXPECT_NE(x->fix.find("set decode=\"auto\""), std::string::npos) << x->fix;
  // The rest of the fix stands: the thread count comes first.
  EXPECT_LT(x->fix.find("threads=3"), x->fix.find("decode=\"auto\"")) << x->fix;
  const Evidence* rate = FindEvidence(*x, "cpu_decode_images_per_s_per_thread");
  ASSERT_NE(rate, nullptr);
  EXPECT_NEAR(rate->value, 1 / 1.8e-3, 0.01);
}

TEST(DecodeSplitRules, AutoWithoutTheGpuDecoderSaysWhatToInstall) {
  const Analysis a = Analyze(Starved(true, DecodeRecord(2, false, 10240, 0, 0)));
  const Finding* x = Find(a.findings, "input_pipeline");
  ASSERT_NE(x, nullptr);
  EXPECT_NE(x->fix.find("GPU decoder did not load"), std::string::npos) << x->fix;
  EXPECT_NE(x->fix.find("nvidia-nvjpeg"), std::string::npos) << x->fix;
}

TEST(DecodeSplitRules, AutoGivingTheGpuNearlyAllSuggestsGpu) {
  const Analysis a = Analyze(Starved(true, DecodeRecord(2, true, 512, 9728, 950, 300, 9000)));
  const Finding* x = Find(a.findings, "input_pipeline");
  ASSERT_NE(x, nullptr);
  EXPECT_NE(x->fix.find("already gives the GPU 95% of the JPEGs: decode=\"gpu\""),
            std::string::npos)
      << x->fix;
  ASSERT_NE(FindEvidence(*x, "gpu_decode_pct"), nullptr);
}

TEST(DecodeSplitRules, NoDecodeAdviceWhereThereIsNothingToMove) {
  // auto, balanced: both sides already work.
  const Analysis balanced =
      Analyze(Starved(true, DecodeRecord(2, true, 5120, 5120, 500, 300, 300)));
  const Finding* x = Find(balanced.findings, "input_pipeline");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->fix.find("decode="), std::string::npos) << x->fix;
  // A host loader without a GPU.
  const Analysis no_gpu = Analyze(Starved(false));
  x = Find(no_gpu.findings, "input_pipeline");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->fix.find("decode="), std::string::npos) << x->fix;
  // A healthy run whose loader decodes on the CPU: no finding to add to.
  RunBuilder healthy;
  healthy.Gpus(1)
      .Steps(40, {{"data_wait", 0.001, SpanKind::kLoader}, {"forward", 0.3}})
      .Loader(LoaderRecord(40, 8, 1.0))
      .Counter("loader_decode", DecodeRecord(0, false, 10240, 0, 0))
      .Samples([](double, SamplePoint& s) {
        s.cpu_busy_pct = 40;
        s.gpus[0].util_pct = 97;
      });
  EXPECT_EQ(Find(Analyze(healthy.Build()).findings, "input_pipeline"), nullptr);
}

TEST(DecodeSplitRules, HostLoaderDecodingOnAGpuMachineSuggestsTheDeviceLoader) {
  const Analysis a = Analyze(Starved(true));
  const Finding* x = Find(a.findings, "input_pipeline");
  ASSERT_NE(x, nullptr);
  EXPECT_NE(x->fix.find("saturate.Loader(..., device=\"cuda\", decode=\"auto\")"),
            std::string::npos)
      << x->fix;
  const Evidence* share = FindEvidence(*x, "loader_decode_pct");
  ASSERT_NE(share, nullptr);
  EXPECT_NEAR(share->value, 90, 1e-6);  // 1.8 ms of 2.0 ms
}

// ---- the report --------------------------------------------------------------------

Analysis WithSplit() {
  Analysis a = testing::SyntheticAnalysis();
  Features& f = a.features;
  f.loader_threads = 8;
  f.decode_mode = "auto";
  f.decode_gpu_decoder = true;
  f.decode_cpu_images = 2400;
  f.decode_gpu_images = 4000;
  f.decode_gpu_fallbacks = 3;
  f.decode_gpu_share = 0.625;
  f.decode_cpu_per_s_per_thread = 300;
  f.decode_gpu_per_s = 4100;
  return a;
}

TEST(DecodeSplitReport, MeasurementsShowModeShareAndRates) {
  const std::string html = RenderHtml(testing::SyntheticRun(), WithSplit());
  const size_t table = html.find("<table class=\"measurements\">");
  ASSERT_NE(table, std::string::npos);
  const std::string m = html.substr(table, html.find("</table>", table) - table);
  EXPECT_NE(m.find("<td>JPEG decode (decode=)</td><td class=\"num\">auto (nvJPEG)</td>"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("<td>JPEGs handed to the GPU, share of each batch now</td>"
                   "<td class=\"num\">62.5%</td>"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("<td>images decoded on the CPU / on the GPU</td>"
                   "<td class=\"num\">2400 / 4000</td>"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("<td>CPU decode rate</td><td class=\"num\">300 images/s per thread x 8 "
                   "threads = 2400 images/s</td>"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("<td>GPU decode rate</td><td class=\"num\">4100 images/s</td>"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("refused (decoded on the CPU)</td><td class=\"num\">3</td>"), std::string::npos)
      << m;
  // Without a device loader's record, none of it.
  const std::string plain = RenderHtml(testing::SyntheticRun(), testing::SyntheticAnalysis());
  EXPECT_EQ(plain.find("JPEG decode"), std::string::npos);
}

// The summary as one line per paragraph (Wrap continues lines with 2 spaces).
std::string Unwrap(std::string text) {
  for (size_t at = text.find("\n  "); at != std::string::npos; at = text.find("\n  ", at)) {
    text.replace(at, 3, " ");
  }
  return text;
}

TEST(DecodeSplitReport, SummaryHasOneDecodeLine) {
  const std::string summary = Unwrap(RenderSummary(testing::SyntheticRun(), WithSplit()));
  EXPECT_NE(summary.find("JPEG decode: auto (nvJPEG); GPU 62% of each batch now; CPU 300 "
                         "images/s per thread x 8"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("GPU 4100 images/s; decoded 2400 on the CPU, 4000 on the GPU"),
            std::string::npos)
      << summary;
  Analysis unavailable = WithSplit();
  unavailable.features.decode_gpu_decoder = false;
  const std::string words = Unwrap(RenderSummary(testing::SyntheticRun(), unavailable));
  EXPECT_NE(words.find("JPEG decode: auto (GPU decoder unavailable: CPU only)"), std::string::npos)
      << words;
  EXPECT_EQ(words.find("of each batch now"), std::string::npos) << words;
  EXPECT_EQ(RenderSummary(testing::SyntheticRun(), testing::SyntheticAnalysis()).find("JPEG"),
            std::string::npos);
}

}  // namespace
}  // namespace saturate::doctor
