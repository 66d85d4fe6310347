"""What deploy/ ships for a fleet: the Prometheus alerting rules and the Grafana dashboard.

- the rules pass `promtool check rules`, and their promtool unit test (planted series:
  idle, saw-tooth, healthy, unallocated, dcgm-exporter, stalled job, exporter down) passes;
  a broken copy is rejected, so the check can fail;
- the dashboard passes a schema check (Grafana itself is not installable on the test
  machines: not in Debian 12, not on PyPI), and every PromQL expression in it parses
  (promtool, as recording rules);
- every metric either names is one `saturate watch --prometheus` serves (a real watch
  with the test-only fake NVML), so a renamed series cannot leave them silently empty.

promtool comes with Debian's `prometheus` (scripts/install-deps.sh); without it the
promtool tests skip with that reason.
"""

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO, fake_nvml, free_port, saturate_cmd, scrape_watch_until

RULES = os.path.join(REPO, "deploy", "prometheus", "saturate-rules.yml")
RULES_TEST = os.path.join(REPO, "deploy", "prometheus", "saturate-rules.test.yml")
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "saturate-dashboard.json")
ALERTS = {"SaturateIdleAllocatedGPU", "SaturateSawtoothGPU", "SaturateStalledJob",
          "SaturateExporterDown"}
# Dashboard variables -> a value that makes each expression plain PromQL.
VARIABLE_VALUES = {"Hostname": ".*", "job_id": ".*", "user": ".*", "scrape_job": "saturate",
                   "idle_for": "30m", "idle_below": "5"}


def promtool():
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("promtool not installed (Debian's prometheus package; "
                    "scripts/install-deps.sh installs it in CI)")
    return exe


def run_promtool(*args, cwd=None):
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def rule_exprs():
    """{alert name: expr} from the shipped rules, read without a YAML library: the
    file's layout is fixed by its generator (src/fleet/rules.cc; `expr: |-` blocks)."""
    exprs, name, block = {}, None, None
    for line in open(RULES).read().splitlines():
        if block is not None:
            if line.startswith(" " * 10):
                block.append(line[10:])
                continue
            exprs[name], block = "\n".join(block), None
        m = re.match(r"^      - alert: (\w+)$", line)
        if m:
            name = m.group(1)
        elif line == "        expr: |-":
            block = []
    if block is not None:
        exprs[name] = "\n".join(block)
    return exprs


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def substitute(expr):
    """A dashboard expression with its variables replaced by plain values."""
    for name, value in sorted(VARIABLE_VALUES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("$" + name, value).replace("${" + name + "}", value)
    return expr


def dashboard_exprs():
    return [(p["id"], t["refId"], t["expr"]) for p in dashboard()["panels"]
            for t in p.get("targets", [])]


def variable_query(var):
    q = var.get("query", "")
    return q.get("query", "") if isinstance(q, dict) else q


# ---- the rules --------------------------------------------------------------

def test_promtool_check_rules_passes():
    r = run_promtool("check", "rules", RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 4 rules found" in r.stdout, r.stdout


def test_promtool_unit_tests_pass():
    # Relative rule_files in the test file: run from its folder.
    r = run_promtool("test", "rules", os.path.basename(RULES_TEST),
                     cwd=os.path.dirname(RULES_TEST))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout, r.stdout


def test_rules_name_the_four_alerts():
    assert set(rule_exprs()) == ALERTS


@pytest.mark.parametrize("breakage", [
    ("max_over_time(DCGM_FI_DEV_GPU_UTIL{job_id!=\"\"}[30m])",
     "max_over_time(DCGM_FI_DEV_GPU_UTIL{job_id!=\"\"}[30m)"),   # PromQL syntax
    ("for: '5m'", "for: 'five minutes'"),                          # a bad duration
    ("  - name: saturate\n", "  - name: saturate\n   bad-indent: [\n"),  # YAML
])
def test_promtool_rejects_a_broken_copy(tmp_path, breakage):
    old, new = breakage
    text = open(RULES).read()
    assert old in text, old
    broken = tmp_path / "broken-rules.yml"
    broken.write_text(text.replace(old, new, 1))
    r = run_promtool("check", "rules", str(broken))
    assert r.returncode != 0, r.stdout
    assert "FAILED" in (r.stdout + r.stderr) or "error" in (r.stdout + r.stderr).lower()


def test_promtool_unit_test_catches_a_wrong_rule(tmp_path):
    """The unit test is not vacuous: without the saw-tooth's `for`, a job that only
    ramps up fires too, and the test says so."""
    text = open(RULES).read()
    assert text.count("        for: '10m'\n") == 1
    (tmp_path / "saturate-rules.yml").write_text(text.replace("        for: '10m'\n", ""))
    shutil.copy(RULES_TEST, tmp_path / "saturate-rules.test.yml")
    r = run_promtool("test", "rules", "saturate-rules.test.yml", cwd=str(tmp_path))
    assert r.returncode != 0, r.stdout
    assert "SaturateSawtoothGPU" in r.stdout + r.stderr


# ---- the dashboard ----------------------------------------------------------

def test_dashboard_schema():
    d = dashboard()
    for key in ("__inputs", "__requires", "title", "uid", "schemaVersion", "panels", "templating",
                "time", "tags"):
        assert key in d, key
    assert 36 <= d["schemaVersion"] <= 41
    assert d["id"] is None  # an export: Grafana assigns the id on import
    inputs = {i["name"]: i for i in d["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    required = {(r["type"], r["id"]) for r in d["__requires"]}
    assert ("datasource", "prometheus") in required and ("grafana", "grafana") in required
    for kind in {p["type"] for p in d["panels"]}:
        assert ("panel", kind) in required, kind

    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), ids
    assert all(isinstance(i, int) and i > 0 for i in ids)
    ds = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    for p in d["panels"]:
        assert p["title"] and p["type"] in {"stat", "timeseries", "table", "status-history",
                                            "heatmap", "bargauge", "gauge"}, p
        assert p["datasource"] == ds, p["title"]
        assert p["targets"], p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), p["title"]
        for t in p["targets"]:
            assert t.get("expr", "").strip(), (p["title"], t)
            assert t.get("datasource", ds) == ds, p["title"]

    # Variables: the datasource input, and filters from label_values.
    variables = {v["name"]: v for v in d["templating"]["list"]}
    for name in ("Hostname", "job_id", "user"):
        v = variables[name]
        assert v["type"] == "query" and v["datasource"] == ds
        assert re.fullmatch(r"label_values\(\w+(\{.*\})?, " + name + r"\)", variable_query(v)), v
        assert v["includeAll"] and v["allValue"] == ".*"  # "All" also matches series without it
    used = set(re.findall(r"\$\{?(\w+)", json.dumps([e for _, _, e in dashboard_exprs()])))
    assert used <= set(variables), used - set(variables)
    assert set(VARIABLE_VALUES) == set(variables)


def test_dashboard_layout_fits_24_columns_without_overlap():
    cells = {}
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        x, y, w, h = g["x"], g["y"], g["w"], g["h"]
        assert w > 0 and h > 0 and x >= 0 and y >= 0 and x + w <= 24, (p["title"], g)
        for cx in range(x, x + w):
            for cy in range(y, y + h):
                other = cells.get((cx, cy))
                assert other is None, f"{p['title']} overlaps {other} at x={cx}, y={cy}"
                cells[(cx, cy)] = p["title"]


def test_dashboard_has_the_promised_panels():
    exprs = " ".join(e for _, _, e in dashboard_exprs())
    titles = " ".join(p["title"].lower() for p in dashboard()["panels"])
    for word in ("heat map", "per job", "idle allocated", "memory", "power", "host cpu",
                 "process tree", "steps", "exporter"):
        assert word in titles, word
    assert "rate(saturate_job_steps_total{" in exprs and "[1m])" in exprs
    for metric in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
                   "saturate_host_cpu_pct", "saturate_process_tree_cpu_pct",
                   "saturate_process_tree_rss_bytes", "up{"):
        assert metric in exprs, metric


def test_dashboard_idle_table_is_the_alert_expression():
    """With the variables at their defaults and no filters, the idle table asks what
    the SaturateIdleAllocatedGPU alert asks."""
    table = [p for p in dashboard()["panels"] if p["type"] == "table"
             and "idle" in p["title"].lower()]
    assert len(table) == 1
    expr = table[0]["targets"][0]["expr"]
    expr = expr.replace(', Hostname=~"$Hostname", job_id=~"$job_id", user=~"$user"', "")
    squash = lambda s: re.sub(r"\s+", "", s)  # noqa: E731
    assert squash(substitute(expr)) == squash(rule_exprs()["SaturateIdleAllocatedGPU"])


def test_dashboard_expressions_parse(tmp_path):
    """promtool parses every panel expression (variables substituted), as recording rules."""
    exe = promtool()
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for panel_id, ref, expr in dashboard_exprs():
        lines.append(f"      - record: dashboard:panel_{panel_id}_{ref}")
        lines.append("        expr: |-")
        lines += ["          " + line for line in substitute(expr).splitlines()]
    path = tmp_path / "dashboard-exprs.yml"
    path.write_text("\n".join(lines) + "\n")
    r = subprocess.run([exe, "check", "rules", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# ---- the names they use are the names saturate serves -----------------------

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                   "unless", "offset", "bool", "inf", "nan"}


def metric_names(expr):
    """The metric names a PromQL expression selects (a small scanner: strings, label
    matchers, ranges, label lists and offsets out; what is left and is not a function
    call, keyword or number is a metric name)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+\S+", " ", s)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        before = s[m.start() - 1] if m.start() else " "
        if before.isdigit() or before in "$.":
            continue  # 30m, 1e3, a variable
        if s[m.end():].lstrip().startswith("(") or m.group(0).lower() in PROMQL_KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def test_metric_name_scanner():
    assert metric_names('avg by (job_id, user) (a_b{x="y", z=~"$v"}) + b:c offset 5m') == \
        {"a_b", "b:c"}
    assert metric_names("count(x == 0) or vector(0)") == {"x"}
    assert metric_names("rate(s_total[1m]) > 1e3 and on(Hostname, job_id) t > 0") == \
        {"s_total", "t"}


def used_metrics():
    used = set()
    for expr in rule_exprs().values():
        used |= metric_names(expr)
    for _, _, expr in dashboard_exprs():
        used |= metric_names(substitute(expr))
    for v in dashboard()["templating"]["list"]:
        m = re.match(r"label_values\((\w+)", variable_query(v))
        if m:
            used.add(m.group(1))
    return used


def scrape_watch(env):
    """The /metrics page of a real `saturate watch --prometheus` around `sleep`, once it
    shows GPU and process-tree series."""
    nvml = fake_nvml()
    port = free_port()
    cmd = saturate_cmd() + ["watch", "--nvml-library", nvml, "--no-record",
                            "--prometheus", str(port), "-q", "--", "sleep", "30"]
    proc = subprocess.Popen(cmd, env=dict(os.environ, **env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    page = scrape_watch_until(proc, port, lambda page: "DCGM_FI_DEV_GPU_UTIL{" in page and
                              "saturate_process_tree_processes{" in page, timeout=20)
    assert "DCGM_FI_DEV_GPU_UTIL{" in page, page[:2000]
    assert "saturate_process_tree_processes{" in page, page[:2000]
    return page


def page_samples(page):
    """{metric name: [label dict, ...]} from the Prometheus text format."""
    samples = {}
    for line in page.splitlines():
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s", line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
            samples.setdefault(m.group(1), []).append(labels)
    return samples


def test_rules_and_dashboard_use_only_series_saturate_serves():
    page = scrape_watch({"SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "tester"})
    served = page_samples(page)
    used = used_metrics()
    # `up` is Prometheus' own series per scrape target.
    # saturate_job_steps_total: the counter of steps a watched job marked; it appears
    # once the job marks a step (pending in this tree: issue 24's job labels work adds
    # it), so it may be absent from a watch around `sleep`.
    allowed_absent = {"up", "saturate_job_steps_total"}
    missing = sorted(used - set(served) - allowed_absent)
    assert not missing, f"used by deploy/ but not served by saturate watch: {missing}"
    assert {"DCGM_FI_DEV_GPU_UTIL", "saturate_process_tree_processes"} <= used

    # The labels they select on and join by.
    for labels in served["DCGM_FI_DEV_GPU_UTIL"]:
        assert labels.get("Hostname") and labels.get("gpu"), labels
    assert any(lb.get("cpu") == "all" and lb.get("mode") for lb in served["saturate_host_cpu_pct"])
    if any("job_id" in lb for samples in served.values() for lb in samples):
        # Job labels are exported: an allocated GPU and its job's process tree carry
        # the Slurm job and user (the idle rule selects, the stall rule joins on them).
        for name in ("DCGM_FI_DEV_GPU_UTIL", "saturate_process_tree_processes"):
            for labels in served[name]:
                assert labels.get("job_id") == "4242" and labels.get("user") == "tester", \
                    (name, labels)
