#include "watch/job_labels.h"

#include <gtest/gtest.h>

#include <map>

#include "watch/snapshot.h"

namespace saturate::watch {
namespace {

base::GetEnv EnvOf(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(JobLabelsTest, SlurmJobWithItsGpus) {
  JobLabels job = JobLabelsFromEnv(
      EnvOf({{"SLURM_JOB_ID", "4242"}, {"SLURM_JOB_USER", "alice"}, {"SLURM_JOB_GPUS", "1,3"}}));
  EXPECT_EQ(job.labels, (Labels{{"job_id", "4242"}, {"user", "alice"}}));
  ASSERT_TRUE(job.gpus.has_value());
  EXPECT_EQ(*job.gpus, (std::vector<int>{1, 3}));
  EXPECT_FALSE(GpuInJob(job, 0, 4));
  EXPECT_TRUE(GpuInJob(job, 3, 4));
  // cgroups show the job only its own two GPUs, renumbered 0 and 1.
  EXPECT_TRUE(GpuInJob(job, 0, 2));
}

TEST(JobLabelsTest, StepGpusWinAndRangesExpand) {
  JobLabels job = JobLabelsFromEnv(
      EnvOf({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_GPUS", "0-7"}, {"SLURM_STEP_GPUS", "2-4,6"}}));
  EXPECT_EQ(*job.gpus, (std::vector<int>{2, 3, 4, 6}));
  EXPECT_FALSE(JobLabelsFromEnv(EnvOf({{"SLURM_JOB_GPUS", "gpu:2"}})).gpus.has_value());
  EXPECT_FALSE(JobLabelsFromEnv(EnvOf({{"SLURM_JOB_GPUS", "3-1"}})).gpus.has_value());
}

TEST(JobLabelsTest, KubernetesAndTorchrun) {
  JobLabels job = JobLabelsFromEnv(EnvOf({{"POD_NAME", "train-0"},
                                          {"POD_NAMESPACE", "vision"},
                                          {"TORCHELASTIC_RUN_ID", "resnet-17"}}));
  ASSERT_EQ(job.labels.size(), 4u);
  EXPECT_EQ(job.labels[0].first, "user");  // this process's login name
  EXPECT_EQ(job.labels[1], (std::pair<std::string, std::string>{"namespace", "vision"}));
  EXPECT_EQ(job.labels[2], (std::pair<std::string, std::string>{"pod", "train-0"}));
  EXPECT_EQ(job.labels[3], (std::pair<std::string, std::string>{"run_id", "resnet-17"}));
  EXPECT_FALSE(job.gpus.has_value());
}

TEST(JobLabelsTest, NoJobNoLabels) {
  EXPECT_TRUE(JobLabelsFromEnv(EnvOf({})).labels.empty());
  // torchrun's default run id names no job.
  EXPECT_TRUE(JobLabelsFromEnv(EnvOf({{"TORCHELASTIC_RUN_ID", "none"}})).labels.empty());
}

TEST(JobLabelsTest, LabelFlags) {
  auto ok = ParseLabelFlag("team=vision=v2");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->first, "team");
  EXPECT_EQ(ok->second, "vision=v2");
  for (const char* bad : {"team", "=x", "9lives=x", "a-b=x", "__name__=x", "team="}) {
    EXPECT_FALSE(ParseLabelFlag(bad).ok()) << bad;
  }
  auto job = ParseLabelFlag("job=x");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("use job_id"), std::string::npos);
  auto gpu = ParseLabelFlag("gpu=3");
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.status().message().find("saturate already sets"), std::string::npos);
}

TEST(JobLabelsTest, MergeReplacesByName) {
  EXPECT_EQ(MergeLabels({{"job_id", "1"}, {"user", "a"}}, {{"user", "b"}, {"team", "t"}}),
            (Labels{{"job_id", "1"}, {"user", "b"}, {"team", "t"}}));
}

TEST(JobLabelsTest, PrometheusPageLabelsOnlyTheJobsGpus) {
  Snapshot s;
  s.gpus.resize(2);
  s.gpus[0].index = 0;
  s.gpus[0].util_pct = 0;
  s.gpus[1].index = 1;
  s.gpus[1].util_pct = 93;
  JobLabels job{{{"job_id", "77"}, {"user", "bob"}}, std::vector<int>{1}};
  const std::string page = SnapshotPrometheus(s, {}, "node-a", job, 5, 0);
  EXPECT_NE(page.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"\",pci_bus_id=\"\",device=\"nvidia0\","
                      "modelName=\"\",Hostname=\"node-a\"} 0\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("modelName=\"\",Hostname=\"node-a\",job_id=\"77\",user=\"bob\"} 93\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_watch_samples_total{Hostname=\"node-a\",job_id=\"77\","
                      "user=\"bob\"} 5\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_host_cpu_pct{Hostname=\"node-a\",job_id=\"77\",user=\"bob\","
                      "cpu=\"all\",mode=\"user\"}"),
            std::string::npos)
      << page;
}

TEST(JobLabelsTest, LoaderSeriesPerRankInTheirUnits) {
  const std::map<int, std::map<std::string, int64_t>> by_rank = {
      {0,
       {{"samples", 640},
        {"wait_ns", 1'500'000'000},
        {"remote_cache_hits", 3},
        {"remote_cache_misses", 1},
        {"remote_in_flight", 8}}},
      {1, {{"samples", 600}}},
  };
  const std::string page = LoaderPrometheus({{"Hostname", "n"}}, by_rank);
  EXPECT_NE(page.find("# TYPE saturate_loader_samples_total counter\n"
                      "saturate_loader_samples_total{Hostname=\"n\",rank=\"0\"} 640\n"
                      "saturate_loader_samples_total{Hostname=\"n\",rank=\"1\"} 600\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_loader_wait_seconds_total{Hostname=\"n\",rank=\"0\"} 1.5\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("# TYPE saturate_remote_in_flight_requests gauge\n"
                      "saturate_remote_in_flight_requests{Hostname=\"n\",rank=\"0\"} 8\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_remote_cache_hit_ratio{Hostname=\"n\",rank=\"0\"} 0.75\n"),
            std::string::npos)
      << page;
  // Neither rank has these: no family at all, not an empty one.
  EXPECT_EQ(page.find("saturate_remote_errors_total"), std::string::npos) << page;
  EXPECT_EQ(LoaderPrometheus({}, {}), "");
}

TEST(JobLabelsTest, PrecisionSeriesPerRank) {
  const std::string page = JobPrecisionPrometheus({{"Hostname", "n"}}, {{0, 16}, {3, 32}});
  EXPECT_NE(page.find("# TYPE saturate_job_precision_bits gauge\n"
                      "saturate_job_precision_bits{Hostname=\"n\",rank=\"0\"} 16\n"
                      "saturate_job_precision_bits{Hostname=\"n\",rank=\"3\"} 32\n"),
            std::string::npos)
      << page;
  EXPECT_EQ(JobPrecisionPrometheus({{"Hostname", "n"}}, {}), "");
}

// A device loader's decode split: images by where, the GPU's share, the mode
// as a state set; the rates only once measured.
TEST(JobLabelsTest, LoaderDecodeSplitSeries) {
  const std::map<int, std::map<std::string, int64_t>> by_rank = {
      {0,
       {{"samples", 640},
        {"decode_mode", 2},
        {"gpu_decoder", 1},
        {"cpu_decoded", 240},
        {"gpu_decoded", 400},
        {"gpu_decode_ns", 250'000'000},
        {"gpu_decode_fallbacks", 2},
        {"gpu_decode_cut", 300},
        {"gpu_permille", 625},
        {"cpu_per_s_per_thread", 300},
        {"gpu_per_s", 4000}}},
      {1, {{"samples", 600}}},
      {2,
       {{"decode_mode", 0},
        {"gpu_decoder", 0},
        {"cpu_decoded", 90},
        {"gpu_decoded", 0},
        {"gpu_permille", 0},
        {"cpu_per_s_per_thread", 0},
        {"gpu_per_s", 0}}},
  };
  const std::string page = LoaderPrometheus({{"Hostname", "n"}}, by_rank);
  EXPECT_NE(page.find("# TYPE saturate_loader_decoded_images_total counter\n"
                      "saturate_loader_decoded_images_total{Hostname=\"n\",rank=\"0\",where="
                      "\"cpu\"} 240\n"
                      "saturate_loader_decoded_images_total{Hostname=\"n\",rank=\"0\",where="
                      "\"gpu\"} 400\n"
                      "saturate_loader_decoded_images_total{Hostname=\"n\",rank=\"2\",where="
                      "\"cpu\"} 90\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("# TYPE saturate_loader_gpu_decode_ratio gauge\n"
                      "saturate_loader_gpu_decode_ratio{Hostname=\"n\",rank=\"0\"} 0.625\n"
                      "saturate_loader_gpu_decode_ratio{Hostname=\"n\",rank=\"2\"} 0\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_loader_decode_mode{Hostname=\"n\",rank=\"0\",mode=\"cpu\"} 0\n"
                      "saturate_loader_decode_mode{Hostname=\"n\",rank=\"0\",mode=\"gpu\"} 0\n"
                      "saturate_loader_decode_mode{Hostname=\"n\",rank=\"0\",mode=\"auto\"} 1\n"
                      "saturate_loader_decode_mode{Hostname=\"n\",rank=\"2\",mode=\"cpu\"} 1\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_loader_gpu_decode_seconds_total{Hostname=\"n\",rank=\"0\"} 0.25\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_loader_gpu_decode_fallbacks_total{Hostname=\"n\",rank=\"0\"} 2\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_loader_gpu_decode_cut_total{Hostname=\"n\",rank=\"0\"} 300\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_loader_gpu_decoder_available{Hostname=\"n\",rank=\"2\"} 0\n"),
            std::string::npos)
      << page;
  // Rates: rank 0's measured ones; rank 2 has measured none (0), so no series.
  EXPECT_NE(page.find("# TYPE saturate_loader_gpu_decode_images_per_s gauge\n"
                      "saturate_loader_gpu_decode_images_per_s{Hostname=\"n\",rank=\"0\"} "
                      "4000\n"),
            std::string::npos)
      << page;
  EXPECT_EQ(page.find("saturate_loader_gpu_decode_images_per_s{Hostname=\"n\",rank=\"2\"}"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_loader_cpu_decode_images_per_s_per_thread{Hostname=\"n\",rank="
                      "\"0\"} 300\n"),
            std::string::npos)
      << page;
  // Rank 1 has no device loader: none of its series.
  EXPECT_EQ(page.find("rank=\"1\",where"), std::string::npos) << page;
  EXPECT_EQ(page.find("saturate_loader_gpu_decode_ratio{Hostname=\"n\",rank=\"1\"}"),
            std::string::npos)
      << page;
}

}  // namespace
}  // namespace saturate::watch
