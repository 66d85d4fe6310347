#include "doctor/report.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "doctor/testing/report_fixture.h"

namespace saturate::doctor {
namespace {

using testing::SyntheticAnalysis;
using testing::SyntheticRun;
// (Inside TEST bodies `Run` names testing::Test::Run, hence doctor::Run below.)

constexpr const char* kHostile = "<script>alert('x')</script>";

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) {
    ++n;
  }
  return n;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Terminal columns of a UTF-8 line.
size_t Columns(const std::string& line) {
  size_t n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80;
  return n;
}

// ---- HtmlEscape -------------------------------------------------------------

TEST(ReportHtmlEscape, EscapesMarkupCharacters) {
  EXPECT_EQ(HtmlEscape("a < b && c > \"d\" 'e'"),
            "a &lt; b &amp;&amp; c &gt; &quot;d&quot; &#39;e&#39;");
  EXPECT_EQ(HtmlEscape(""), "");
  EXPECT_EQ(HtmlEscape("plain text · 2 → 6"), "plain text · 2 → 6");
}

// ---- RenderHtml -------------------------------------------------------------

TEST(ReportHtml, IsOneDocumentWithTitleAndHeader) {
  const std::string html = RenderHtml(SyntheticRun(), SyntheticAnalysis());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(Count(html, "<html"), 1u);
  EXPECT_EQ(Count(html, "</html>"), 1u);
  EXPECT_NE(html.find("<title>saturate doctor: doctor-20261123-101500</title>"), std::string::npos);
  EXPECT_NE(html.find("gpu-box-7"), std::string::npos);
  // Arguments with spaces are quoted as a shell needs them.
  EXPECT_NE(html.find("python train.py --epochs 3 --data &#39;/data/imagenet train&#39;"),
            std::string::npos);
  EXPECT_NE(html.find("62.3 s"), std::string::npos);
  EXPECT_NE(html.find("1 GPU (80.0 GiB)"), std::string::npos);
  EXPECT_NE(html.find("<dt>exit code</dt><dd>0</dd>"), std::string::npos);
}

TEST(ReportHtml, FetchesNothingAndRunsNoScript) {
  Analysis analysis = SyntheticAnalysis();
  const std::string html = RenderHtml(SyntheticRun(), analysis);
  for (const char* external : {"http:", "https:", "src=", "href=", "url(", "@import", "<script",
                               "<link", "<img", "<iframe", "xlink"}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }
}

TEST(ReportHtml, EscapesEveryStringFromTheRun) {
  doctor::Run run = SyntheticRun();
  run.meta.command.push_back(kHostile);
  run.meta.dir = std::string("runs/") + kHostile;
  run.meta.host = kHostile;
  run.meta.gpu_status = kHostile;
  run.warnings.push_back(kHostile);
  run.loaders[0].values[kHostile] = 1;
  Analysis analysis = SyntheticAnalysis();
  Finding& f = analysis.findings[0];
  f.cause = kHostile;
  f.title = kHostile;
  f.fix = kHostile;
  f.evidence[0].text = kHostile;
  f.evidence[1].unit = kHostile;
  f.fix_value->first = kHostile;
  analysis.features.phases[1].name = kHostile;
  const std::string html = RenderHtml(run, analysis);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("alert('x')"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), std::string::npos);
  // Command, directory (title and header), host, GPU status, warning, loader
  // counter, cause, title, fix, evidence text and unit, fix value name, phase
  // name (row label and bar tooltip) — the phase label is truncated.
  EXPECT_GE(Count(html, "&lt;script&gt;alert("), 13u);
}

TEST(ReportHtml, FindingsInTheGivenOrderWithEvidenceAndFix) {
  Analysis analysis = SyntheticAnalysis();
  const std::string html = RenderHtml(SyntheticRun(), analysis);
  const size_t first = html.find(">input_pipeline</td>");
  const size_t second = html.find(">cpu_contention</td>");
  ASSERT_NE(first, std::string::npos);
  ASSERT_NE(second, std::string::npos);
  EXPECT_LT(first, second);
  EXPECT_NE(html.find("31.2 s<br>50.1% of the run"), std::string::npos);
  EXPECT_NE(html.find("<b>52.0%</b> of step time spent waiting for the next batch"),
            std::string::npos);
  EXPECT_NE(html.find("<b>2.10 ms</b> per-sample decode"), std::string::npos);
  EXPECT_NE(html.find("<b>2800 samples/s</b>"), std::string::npos);
  EXPECT_NE(html.find("threads 2 → 6 (per-sample decode 2.1 ms × 2800 samples/s target)"),
            std::string::npos);
  EXPECT_NE(html.find("<code>threads = 6</code>"), std::string::npos);
  EXPECT_NE(html.find("high (90%)"), std::string::npos);
  EXPECT_NE(html.find("medium (55%)"), std::string::npos);

  // Reversed input, reversed table: the report keeps the analysis's ranking.
  std::swap(analysis.findings[0], analysis.findings[1]);
  const std::string swapped = RenderHtml(SyntheticRun(), analysis);
  EXPECT_GT(swapped.find(">input_pipeline</td>"), swapped.find(">cpu_contention</td>"));
}

TEST(ReportHtml, DrawsEachChartWhenThereIsData) {
  const std::string html = RenderHtml(SyntheticRun(), SyntheticAnalysis());
  EXPECT_EQ(Count(html, "<svg "), 4u);
  EXPECT_EQ(Count(html, "<svg "), Count(html, "</svg>"));
  EXPECT_EQ(Count(html, "role=\"img\""), 4u);
  EXPECT_EQ(Count(html, "class=\"empty\""), 0u);
  // Timeline: the device line (with its shaded area) and the host CPU line.
  const size_t timeline = html.find("<figure id=\"timeline\">");
  const size_t phases = html.find("<figure id=\"phases\">");
  const size_t waterfall = html.find("<figure id=\"waterfall\">");
  const size_t gaps = html.find("<figure id=\"idle-gaps\">");
  ASSERT_NE(waterfall, std::string::npos);
  ASSERT_NE(timeline, std::string::npos);
  ASSERT_NE(phases, std::string::npos);
  ASSERT_NE(gaps, std::string::npos);
  const std::string t = html.substr(timeline, phases - timeline);
  EXPECT_EQ(Count(t, "<polyline"), 2u);
  EXPECT_EQ(Count(t, "<polygon"), 1u);
  EXPECT_NE(t.find(">100%</text>"), std::string::npos);
  EXPECT_NE(t.find(">60</text>"), std::string::npos);  // a time tick
  EXPECT_NE(t.find("time since start (s)"), std::string::npos);
  EXPECT_NE(t.find("host CPU busy"), std::string::npos);
  // Phases: one bar per phase, labelled with its share and time.
  const std::string p = html.substr(phases, waterfall - phases);
  EXPECT_EQ(Count(p, "<rect"), 6u);
  EXPECT_NE(p.find(">data_wait</text>"), std::string::npos);
  EXPECT_NE(p.find("52.0% · 32.4 s"), std::string::npos);
  // Waterfall: one row per step, one bar per phase in it, a legend entry per phase.
  const std::string w = html.substr(waterfall, gaps - waterfall);
  EXPECT_EQ(Count(w, "<rect"), 8u);
  EXPECT_NE(w.find(">step 240</text>"), std::string::npos);
  EXPECT_NE(w.find("<title>data_wait: 70 ms</title>"), std::string::npos) << w;
  EXPECT_NE(w.find(">100 ms</text>"), std::string::npos);  // a time tick
  // Idle gaps: one bar per bucket, open-ended labels at both ends.
  const std::string g = html.substr(gaps);
  EXPECT_EQ(Count(g, "<rect"), 7u);
  EXPECT_NE(g.find(">&lt; 0.05 s</text>"), std::string::npos);
  EXPECT_NE(g.find(">0.25–0.5 s</text>"), std::string::npos);
  EXPECT_NE(g.find(">≥ 2 s</text>"), std::string::npos);
  EXPECT_NE(g.find(">41</text>"), std::string::npos);
  EXPECT_NE(g.find("recur about every 1.1 s"), std::string::npos);
}

TEST(ReportHtml, ListsTheMeasurements) {
  const std::string html = RenderHtml(SyntheticRun(), SyntheticAnalysis());
  const size_t table = html.find("<table class=\"measurements\">");
  ASSERT_NE(table, std::string::npos);
  const std::string m = html.substr(table, html.find("</table>", table) - table);
  EXPECT_NE(m.find("<td>median step time</td><td class=\"num\">130 ms</td>"), std::string::npos);
  EXPECT_NE(m.find("<td>loader threads</td><td class=\"num\">2</td>"), std::string::npos);
  EXPECT_NE(m.find("<td>loader CPU per sample</td><td class=\"num\">2.1 ms</td>"),
            std::string::npos);
  EXPECT_NE(m.find("<td>GPU 0 busy, mean over training</td><td class=\"num\">41.2%</td>"),
            std::string::npos);
  EXPECT_EQ(m.find("communication"), std::string::npos);  // not measured: not listed
}

// The precision and weights the auto-instrumentation saw: a line under the
// headline numbers on a GPU run, and a row of the measurements.
TEST(ReportHtml, ShowsTheTrainingMathAndWeights) {
  Analysis analysis = SyntheticAnalysis();
  analysis.features.precision_bits = 32;
  analysis.features.precision_source = "precision";
  analysis.features.tf32_matmul = true;
  analysis.features.model_shapes = Features::ModelShapes{53, 36, 3, 1};
  const std::string words =
      "32-bit (TF32 matmuls allowed); convolution weights: 36 of 53 NCHW; Linear/Embedding "
      "weights: 1 of 3 with a size not a multiple of 8";
  const std::string html = RenderHtml(SyntheticRun(), analysis);
  EXPECT_NE(html.find("<td>training math</td><td class=\"num\">" + words + "</td>"),
            std::string::npos);
  std::istringstream wrapped(RenderSummary(SyntheticRun(), analysis));
  std::string summary;
  for (std::string word; wrapped >> word;) summary += word + " ";  // unwrapped
  EXPECT_NE(summary.find("math: 32-bit (TF32 matmuls allowed); convolution weights: 36 of 53"),
            std::string::npos)
      << summary;
  analysis.features.gpu_count = 0;  // a CPU run: not in the summary
  EXPECT_EQ(RenderSummary(SyntheticRun(), analysis).find("math:"), std::string::npos);
}

TEST(ReportHtml, OneLinePerGpuWhenThereAreSeveral) {
  doctor::Run run = SyntheticRun();
  run.meta.gpu_count = 2;
  for (SamplePoint& s : run.samples) {
    GpuPoint second = s.gpus[0];
    second.index = 1;
    second.util_pct = 50;
    s.gpus.push_back(second);
  }
  const std::string html = RenderHtml(run, SyntheticAnalysis());
  EXPECT_NE(html.find("GPU 0 utilization"), std::string::npos);
  EXPECT_NE(html.find("GPU 1 utilization"), std::string::npos);
  EXPECT_EQ(Count(html, "<polyline"), 4u);
}

TEST(ReportHtml, LongRunsAreDownsampled) {
  doctor::Run run = SyntheticRun();
  Analysis analysis = SyntheticAnalysis();
  analysis.features.device_busy_timeline.clear();
  for (int i = 0; i < 50000; ++i) {
    analysis.features.device_busy_timeline.push_back({i * 0.1, double(i % 100)});
  }
  const std::string html = RenderHtml(run, analysis);
  EXPECT_LT(html.size(), 200'000u);
}

TEST(ReportHtml, EmptyChartsSayWhatIsMissing) {
  doctor::Run run = SyntheticRun();
  run.samples.clear();
  run.loaders.clear();
  run.meta.gpu_count = 0;
  run.meta.gpu_memory_total_bytes.clear();
  run.meta.exit_code = 1;
  Analysis analysis;
  analysis.features.duration_s = 12;
  const std::string html = RenderHtml(run, analysis);
  EXPECT_EQ(Count(html, "<svg"), 0u);
  EXPECT_EQ(Count(html, "class=\"empty\""), 4u);
  EXPECT_NE(html.find("no utilization samples recorded"), std::string::npos);
  EXPECT_NE(html.find("no step spans recorded"), std::string::npos);
  EXPECT_NE(html.find("saturate.phase("), std::string::npos);
  EXPECT_NE(html.find("no idle gaps recorded"), std::string::npos);
  EXPECT_NE(html.find("no GPU: device = the training process"), std::string::npos);
  EXPECT_NE(html.find("no cause costs more than 2% of the run"), std::string::npos);
  EXPECT_NE(html.find("<dd>1 (the command failed)</dd>"), std::string::npos);
}

TEST(ReportHtml, HistogramWithOnlyZeroCountsIsEmpty) {
  Analysis analysis = SyntheticAnalysis();
  analysis.features.idle_gaps_s.counts.assign(analysis.features.idle_gaps_s.counts.size(), 0);
  const std::string html = RenderHtml(SyntheticRun(), analysis);
  EXPECT_NE(html.find("no idle gaps recorded"), std::string::npos);
  EXPECT_EQ(Count(html, "<svg "), 3u);
}

TEST(ReportHtml, HealthyRunSaysSo) {
  Analysis analysis = SyntheticAnalysis();
  analysis.findings.clear();
  analysis.features.device_busy_pct = 97.0;
  const std::string html = RenderHtml(SyntheticRun(), analysis);
  EXPECT_NE(
      html.find("no cause costs more than 2% of the run: the device was busy 97% of the time"),
      std::string::npos);
  EXPECT_EQ(html.find("<table class=\"findings\">"), std::string::npos);
}

// ---- Ranks ------------------------------------------------------------------

// The HTML of the figure with id `id` (empty when there is none).
std::string FigureHtml(const std::string& html, const std::string& id) {
  const size_t begin = html.find("<figure id=\"" + id + "\">");
  if (begin == std::string::npos) return "";
  return html.substr(begin, html.find("</figure>", begin) - begin);
}

Analysis RanksAnalysis(int steps = 30) {
  Analysis analysis = SyntheticAnalysis();
  analysis.features.ranks = testing::SyntheticRanks(steps);
  return analysis;
}

TEST(ReportRanks, SectionAfterTheFindingsSaysWhoRanWhere) {
  const std::string html = RenderHtml(SyntheticRun(), RanksAnalysis());
  const size_t findings = html.find("<section id=\"findings\"");
  const size_t ranks = html.find("<section id=\"ranks\"");
  const size_t charts = html.find("<section id=\"charts\"");
  ASSERT_NE(ranks, std::string::npos);
  EXPECT_LT(findings, ranks);
  EXPECT_LT(ranks, charts);
  EXPECT_NE(
      html.find("<p>4 ranks on 2 hosts (gpu-box-7, gpu-box-8); clocks aligned by "
                "collectives, residual skew 0.4 ms. Rank 2 is the straggler: the others wait 41 "
                "ms a step (data wait).</p>"),
      std::string::npos)
      << html.substr(ranks, 600);
  // Three heat maps (step time, data wait, waiting for the others) beside the four charts.
  EXPECT_EQ(Count(html, "<svg "), 7u);
  EXPECT_EQ(Count(html, "<svg "), Count(html, "</svg>"));
}

TEST(ReportRanks, HeatMapHasARowPerRankAndACellPerStep) {
  const std::string html = RenderHtml(SyntheticRun(), RanksAnalysis());
  const std::string steps = FigureHtml(html, "rank-steps");
  ASSERT_FALSE(steps.empty());
  EXPECT_NE(steps.find(">rank 0 · gpu-box-7</text>"), std::string::npos) << steps;
  EXPECT_NE(steps.find(">rank 1 · gpu-box-7</text>"), std::string::npos);
  EXPECT_NE(steps.find(">rank 3 · gpu-box-8</text>"), std::string::npos);
  // The straggler's label is bold and says so.
  EXPECT_NE(steps.find("class=\"value\">rank 2 · gpu-box-8 · straggler</text>"), std::string::npos);
  // 30 + 30 + 27 cells (rank 2 left early), none for the missing rank, which says why.
  EXPECT_EQ(Count(steps, "<title>rank 0, step "), 30u);
  EXPECT_EQ(Count(steps, "<title>rank 2, step "), 27u);
  EXPECT_EQ(Count(steps, "<title>rank 3, "), 0u);
  EXPECT_NE(steps.find(">rank directory missing</text>"), std::string::npos);
  EXPECT_NE(steps.find("<title>rank 0, step 1: 0.161 s</title>"), std::string::npos);
  EXPECT_NE(steps.find("<title>rank 2, step 1: 0.164 s</title>"), std::string::npos);
  // The scale's ends: the fastest and the slowest cell.
  EXPECT_NE(steps.find(">fastest 0.161 s</text>"), std::string::npos);
  EXPECT_NE(steps.find(">0.17 s slowest</text>"), std::string::npos);
  EXPECT_EQ(Count(steps, "<rect"), 87u + 10u);  // cells and the scale's swatches
  // The same shape for data wait and for waiting on the others.
  const std::string data_wait = FigureHtml(html, "rank-data-wait");
  EXPECT_EQ(Count(data_wait, "<title>rank 1, step "), 30u);
  EXPECT_NE(data_wait.find("<title>rank 2, step 2: 0.047 s</title>"), std::string::npos);
  const std::string wait = FigureHtml(html, "rank-wait");
  EXPECT_EQ(Count(wait, "<title>rank 1, step "), 30u);
  EXPECT_NE(wait.find("<title>rank 0, step 2: 0.042 s</title>"), std::string::npos);
}

TEST(ReportRanks, NoWaitMapWhenNoRankWaited) {
  Analysis analysis = RanksAnalysis();
  for (RankRow& r : analysis.features.ranks.rows) std::fill(r.wait_s.begin(), r.wait_s.end(), 0);
  const std::string html = RenderHtml(SyntheticRun(), analysis);
  EXPECT_FALSE(FigureHtml(html, "rank-data-wait").empty());
  EXPECT_TRUE(FigureHtml(html, "rank-wait").empty());
}

TEST(ReportRanks, TableHasARowPerRankWithTheMissingOne) {
  const std::string html = RenderHtml(SyntheticRun(), RanksAnalysis());
  const size_t table = html.find("<table class=\"ranks\">");
  ASSERT_NE(table, std::string::npos);
  const std::string t = html.substr(table, html.find("</table>", table) - table);
  EXPECT_EQ(Count(t, "<tr>"), 5u);  // header and four ranks
  EXPECT_NE(
      t.find("<td class=\"num\">0</td><td class=\"mono\">gpu-box-7</td><td "
             "class=\"mono\">cuda:0</td><td class=\"num\">30</td><td class=\"num\">0.163</td><td "
             "class=\"num\">0.001</td><td class=\"num\">0.042</td><td "
             "class=\"num\">0.0</td><td>0</td>"),
      std::string::npos)
      << t;
  EXPECT_NE(t.find("<b>2</b> straggler"), std::string::npos);
  EXPECT_NE(t.find("<td class=\"num\">-12.5</td><td>0, left early</td>"), std::string::npos);
  EXPECT_NE(t.find("<td class=\"num\">0</td><td class=\"num\">—</td><td "
                   "class=\"num\">—</td><td class=\"num\">—</td><td class=\"num\">—</td>"
                   "<td>rank directory missing</td>"),
            std::string::npos);
}

TEST(ReportRanks, EscapesHostNames) {
  Analysis analysis = RanksAnalysis();
  RanksView& v = analysis.features.ranks;
  v.hosts[0] = "<evil&host>";
  v.rows[0].host = "<evil&host>";
  v.rows[3].note = kHostile;
  v.straggler_reason = kHostile;
  v.clock_method = kHostile;
  const std::string html = RenderHtml(SyntheticRun(), analysis);
  EXPECT_EQ(html.find("<evil"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  // The sentence, a label in each of the three heat maps, the table.
  EXPECT_GE(Count(html, "&lt;evil&amp;host&gt;"), 5u);
  EXPECT_NE(html.find(">rank 0 · &lt;evil&amp;host&gt;</text>"), std::string::npos);
}

TEST(ReportRanks, LongRunsAreBinned) {
  const std::string html = RenderHtml(SyntheticRun(), RanksAnalysis(1000));
  const std::string steps = FigureHtml(html, "rank-steps");
  const size_t per_row = Count(steps, "<title>rank 0, steps ");
  EXPECT_GT(per_row, 0u);
  EXPECT_LE(per_row, 200u);
  EXPECT_EQ(Count(steps, "<title>rank 0, step "), 0u);  // no unbinned cells
  EXPECT_NE(steps.find("<title>rank 0, steps 1–5 (mean): "), std::string::npos) << steps;
  EXPECT_NE(steps.find("<title>rank 0, steps 996–1000 (mean): "), std::string::npos);
  EXPECT_NE(steps.find("step (5 per column)"), std::string::npos);
  EXPECT_LT(html.size(), 400'000u);
}

TEST(ReportRanks, ManyRanksGetFewerColumns) {
  Analysis analysis = RanksAnalysis(1000);
  RanksView& v = analysis.features.ranks;
  v.world_size = 512;
  v.hosts.clear();
  for (int r = 3; r < 512; ++r) {
    RankRow row = v.rows[r % 2];
    row.rank = r;
    row.host = "node-" + std::to_string(r / 8);
    v.rows.push_back(row);
  }
  for (int h = 0; h < 64; ++h) v.hosts.push_back("node-" + std::to_string(h));
  const std::string html = RenderHtml(SyntheticRun(), analysis);
  const std::string steps = FigureHtml(html, "rank-steps");
  // 12000 cells at most: 23 columns of 1000 steps for 512 ranks.
  EXPECT_LE(Count(steps, "<title>rank 0, steps "), 12000u / 512u);
  EXPECT_LE(Count(steps, "<title>rank "), 12000u);
  EXPECT_NE(html.find("512 ranks on 64 hosts (node-0, node-1, node-2, node-3, node-4, node-5, "
                      "node-6, node-7 and 56 more)"),
            std::string::npos);
  EXPECT_LT(html.size(), 6'000'000u);
}

TEST(ReportRanks, SummarySaysRanksStragglerAndClocks) {
  const std::string summary = RenderSummary(SyntheticRun(), RanksAnalysis());
  const std::vector<std::string> lines = Lines(summary);
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines[2],
            "ranks: 4 on 2 hosts; rank 2 is the straggler: the others wait 41 ms a step (data");
  EXPECT_EQ(lines[3], "  wait)");
  EXPECT_EQ(lines[4], "clocks: aligned by collectives, residual skew 0.4 ms");
  EXPECT_EQ(lines[5], "");
  for (const std::string& line : lines) EXPECT_LE(Columns(line), 80u) << line;

  // One host, no straggler: no clock line.
  Analysis one = RanksAnalysis();
  one.features.ranks.hosts = {"gpu-box-7"};
  one.features.ranks.straggler.reset();
  one.features.ranks.clock_method = "none";
  const std::vector<std::string> short_lines = Lines(RenderSummary(SyntheticRun(), one));
  EXPECT_EQ(short_lines[2], "ranks: 4 on 1 host");
  EXPECT_EQ(short_lines[3], "");

  // Two hosts whose clocks could not be aligned: said, in the summary and the page.
  Analysis unaligned = RanksAnalysis();
  unaligned.features.ranks.clock_method = "none";
  const std::vector<std::string> unaligned_lines = Lines(RenderSummary(SyntheticRun(), unaligned));
  EXPECT_EQ(unaligned_lines[4],
            "clocks: not aligned across hosts (times are as each host's clock reads)");
  EXPECT_NE(RenderHtml(SyntheticRun(), unaligned)
                .find("; clocks not aligned across hosts (times are as each host&#39;s clock "
                      "reads)."),
            std::string::npos);
}

TEST(ReportRanks, SingleRankReportHasNoRanks) {
  const std::string html = RenderHtml(SyntheticRun(), SyntheticAnalysis());
  EXPECT_EQ(html.find("id=\"ranks\""), std::string::npos);
  EXPECT_EQ(RenderSummary(SyntheticRun(), SyntheticAnalysis()).find("ranks:"), std::string::npos);
}

// ---- RenderSummary ----------------------------------------------------------

TEST(ReportSummary, ListsFindingsWithTimeAndFix) {
  const std::string summary = RenderSummary(SyntheticRun(), SyntheticAnalysis());
  const std::vector<std::string> lines = Lines(summary);
  ASSERT_GE(lines.size(), 8u) << summary;
  EXPECT_EQ(lines[0], "saturate doctor: runs/doctor-20261123-101500 · 62.3 s · 1 GPU");
  EXPECT_EQ(lines[1], "device busy 41% · data wait 52% of step time · 480 steps, median 130 ms");
  EXPECT_EQ(lines[2], "");
  EXPECT_EQ(lines[3],
            " 1. input_pipeline  31.2 s (50%)  the GPU waits for the next batch: data wait is");
  EXPECT_EQ(lines[4], "                                  52% of step time");
  EXPECT_EQ(lines[5], "    fix: threads 2 → 6 (per-sample decode 2.1 ms × 2800 samples/s target)");
  EXPECT_EQ(lines[6], " 2. cpu_contention   4.0 s ( 6%)  other processes use 2.5 cores the loader");
  EXPECT_EQ(lines[7], "                                  threads could use");
  EXPECT_EQ(lines[8], "    fix: stop or renice the other work on this host while training");
  EXPECT_EQ(lines.back(), "no other cause above 2% of the run.");
  for (const std::string& line : lines) EXPECT_LE(Columns(line), 80u) << line;
  EXPECT_EQ(summary.find('\033'), std::string::npos);
}

TEST(ReportSummary, NoGpuExitCodeAndMoreFindingsThanShown) {
  doctor::Run run = SyntheticRun();
  run.meta.gpu_count = 0;
  run.meta.exit_code = 3;
  const std::string summary = RenderSummary(run, SyntheticAnalysis(), false, 1);
  const std::vector<std::string> lines = Lines(summary);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0], "saturate doctor: runs/doctor-20261123-101500 · 62.3 s");
  EXPECT_EQ(lines[1], "no GPU: device = the training process · exit 3");
  EXPECT_NE(summary.find("input_pipeline"), std::string::npos);
  EXPECT_EQ(summary.find("cpu_contention"), std::string::npos);
  EXPECT_NE(summary.find("1 more finding in the report."), std::string::npos);
}

TEST(ReportSummary, HealthyRun) {
  Analysis analysis = SyntheticAnalysis();
  analysis.findings.clear();
  analysis.features.device_busy_pct = 97.0;
  const std::vector<std::string> lines = Lines(RenderSummary(SyntheticRun(), analysis));
  EXPECT_EQ(lines.back(),
            "no cause costs more than 2% of the run: the device was busy 97% of the time.");
}

TEST(ReportSummary, ColorOnlyWhenAsked) {
  const std::string summary = RenderSummary(SyntheticRun(), SyntheticAnalysis(), true);
  EXPECT_NE(summary.find("\033[1;31minput_pipeline"), std::string::npos);  // 50% of the run
  EXPECT_NE(summary.find("\033[1;33mcpu_contention"), std::string::npos);  // 6%
  EXPECT_NE(summary.find("\033[32mfix:\033[0m"), std::string::npos);
  EXPECT_EQ(Count(summary, "\033["), 2 * Count(summary, "\033[0m"));
}

TEST(ReportSummary, NamesCallSitesAndWhatWasNotCaptured) {
  Analysis analysis = SyntheticAnalysis();
  analysis.features.auto_info = {true, 2, "2.1.0", {{"copy", "AttributeError: no Tensor.to"}}, 0};
  analysis.findings[0].sites = {{"train.py:42", ".item()", "cuda", 480, 1.0, 3.25}};
  const std::string summary = RenderSummary(SyntheticRun(), analysis);
  EXPECT_NE(summary.find("at:  train.py:42 .item() 1/step 3.2 s"), std::string::npos) << summary;
  EXPECT_NE(summary.find("auto-instrumentation: not captured: copy (AttributeError: no "),
            std::string::npos)
      << summary;
  const std::string html = RenderHtml(SyntheticRun(), analysis);
  EXPECT_NE(html.find("<td class=\"mono\">train.py:42</td>"), std::string::npos);
  EXPECT_NE(html.find("not captured: copy"), std::string::npos);
  analysis.features.auto_info = {false, 0, "", {}, 0};
  EXPECT_NE(RenderSummary(SyntheticRun(), analysis).find("auto-instrumentation: off (--no-auto)"),
            std::string::npos);
}

TEST(ReportSummary, EmptyRunStillSaysSomething) {
  doctor::Run run;
  run.meta.dir = "runs/x";
  const std::string summary = RenderSummary(run, Analysis{});
  EXPECT_EQ(summary,
            "saturate doctor: runs/x · 0 ms · no GPU: device = the training process\n"
            "no step data: no optimizer step or saturate.step() mark was recorded\n\n"
            "no cause costs more than 2% of the run.\n");
}

}  // namespace
}  // namespace saturate::doctor
