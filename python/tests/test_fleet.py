"""`saturate fleet` and the shipped alert rules against a real Prometheus.

Debian's `prometheus`, started by the test on 127.0.0.1, scrapes three saturate
exporters, one per pretend node (SATURATE_HOSTNAME), each watching a real CPU
workload as a Slurm job would run it (SLURM_JOB_ID, SLURM_JOB_USER). Their GPU
metrics come from the test-only fake NVML (no GPU here) with planted patterns:
an idle allocation, a saw-tooth job (0/100% alternating every 0.7 s) and a
healthy job at 92%. The rules are `saturate fleet rules` with short windows.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from conftest import fake_nvml, free_port, saturate_cmd

NODES = [  # host, Slurm job, user, FAKE_NVML_UTIL, GPU memory in use (GiB of 80)
    ("node-idle", "101", "alice", "0", "30"),
    ("node-saw", "102", "bob", "square:0:100:700", "60"),
    ("node-ok", "103", "carol", "92", "70"),
]
# A light training-like load: 20 ms of work, 80 ms of waiting.
WORKLOAD = ("import time\nt = time.time()\nwhile time.time() - t < 150:\n"
            "    s = time.time()\n    while time.time() - s < 0.02: sum(range(1000))\n"
            "    time.sleep(0.08)\n")


def api(port, path, **params):
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]


def wait_for(what, predicate, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            value = predicate()
        except OSError:  # Prometheus not listening yet
            value = None
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def firing(port):
    alerts = api(port, "alerts")["alerts"]
    return {(a["labels"]["alertname"], a["labels"].get("job_id", "")) for a in alerts
            if a["state"] == "firing"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if shutil.which("prometheus") is None:
        pytest.skip("Debian's prometheus is not installed (scripts/install-deps.sh installs it)")
    nvml = fake_nvml()
    work = tmp_path_factory.mktemp("fleet")
    procs, ports = [], []
    try:
        for host, job, user, util, mem in NODES:
            port = free_port()
            env = dict(os.environ, SATURATE_HOSTNAME=host, SLURM_JOB_ID=job, SLURM_JOB_USER=user,
                       FAKE_NVML_UTIL=util, FAKE_NVML_MEMORY_USED_GIB=mem)
            cmd = [*saturate_cmd(), "watch", "--nvml-library", nvml, "--no-record", "--no-auto",
                   "-q", "--prometheus", str(port), "--interval", "100ms"]
            if host == "node-ok":
                cmd += ["--label", "team=vision"]
            procs.append(subprocess.Popen([*cmd, "--", sys.executable, "-c", WORKLOAD], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            ports.append(port)
        rules = subprocess.run(
            [*saturate_cmd(), "fleet", "rules", "--idle-for", "15s", "--sawtooth-window", "15s",
             "--stall-for", "1h", "--down-for", "1h"],
            capture_output=True, text=True, check=True).stdout
        # A dcgm-exporter with profiling metrics only, for one node: the ratio of time the
        # graphics engine was active (a recording rule turns saturate's series into it).
        rules += ("  - name: dcgm-profiling\n    rules:\n"
                  "      - record: DCGM_FI_PROF_GR_ENGINE_ACTIVE\n"
                  "        expr: DCGM_FI_DEV_GPU_UTIL{Hostname=\"node-ok\"} / 100\n"
                  "        labels: {exporter: dcgm}\n")
        (work / "rules.yml").write_text(rules)
        targets = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
        (work / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "rule_files: [rules.yml]\n"
            "scrape_configs:\n"
            f"  - job_name: saturate\n    static_configs: [{{targets: [{targets}]}}]\n")
        prom_port = free_port()
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w")))
        try:
            wait_for("Prometheus to scrape all three exporters", lambda: len(
                api(prom_port, "query", query='up{job="saturate"} == 1')["result"]) == 3, 60)
        except BaseException:
            print("targets:", json.dumps(api(prom_port, "targets"), indent=1))
            for p in procs[:-1]:
                print("exporter", p.args, "exit", p.poll(),
                      p.stderr.read() if p.poll() is not None else "")
            raise
        yield {"port": prom_port, "exporters": ports, "procs": procs, "start": time.time()}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def test_exporters_carry_job_labels(cluster):
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster['exporters'][2]}/metrics") as r:
        page = r.read().decode()
    assert ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-fake-0",pci_bus_id="00000000:10:00.0",'
            'device="nvidia0",modelName="Fake GPU 0",Hostname="node-ok",job_id="103",'
            'user="carol",team="vision"} 92') in page
    assert 'saturate_process_tree_processes{Hostname="node-ok",job_id="103",user="carol"' in page


def test_alert_rules_fire_for_the_planted_patterns(cluster):
    port = cluster["port"]
    wait_for("SaturateIdleAllocatedGPU and SaturateSawtoothGPU to fire",
             lambda: {("SaturateIdleAllocatedGPU", "101"), ("SaturateSawtoothGPU", "102")}
             <= firing(port), 90)
    time.sleep(3)  # anything else would have fired by now too
    assert firing(port) == {("SaturateIdleAllocatedGPU", "101"), ("SaturateSawtoothGPU", "102")}
    idle = [a for a in api(port, "alerts")["alerts"]
            if a["labels"]["alertname"] == "SaturateIdleAllocatedGPU"]
    assert sorted(a["labels"]["gpu"] for a in idle) == ["0", "1"]
    assert "alice" in idle[0]["annotations"]["summary"]


def fleet(cluster, *args):
    since = f"{int(time.time() - cluster['start']) + 5}s"
    return subprocess.run(
        [*saturate_cmd(), "fleet", "--prometheus", f"http://127.0.0.1:{cluster['port']}",
         "--since", since, "--step", "1s", "--idle-for", "15s", *args],
        capture_output=True, text=True, timeout=60)


def test_fleet_ranks_the_idle_job_first_and_names_the_sawtooth(cluster, tmp_path):
    wait_for("20 s of data", lambda: time.time() - cluster["start"] > 20, 30)
    out = fleet(cluster, "--json", "--gpu-hour-price", "3", "--html", str(tmp_path / "f.html"))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    jobs = {j["name"]: j for j in report["jobs"]}
    assert [j["name"] for j in report["jobs"]] == ["101", "102", "103"], report["jobs"]
    assert jobs["101"]["user"] == "alice" and jobs["101"]["gpus"] == 2
    assert jobs["101"]["idle_allocated_gpu_hours"] > 0
    assert jobs["102"]["sawtooth_wait_gpu_hours"] > 0
    assert jobs["102"]["idle_allocated_gpu_hours"] == 0
    assert jobs["103"]["wasted_gpu_hours"] == 0
    assert jobs["101"]["cost"] == pytest.approx(3 * jobs["101"]["gpu_hours"])
    kinds = {(f["job"], f["kind"]) for f in report["findings"]}
    assert ("101", "idle_allocation") in kinds and ("102", "sawtooth") in kinds
    assert not [k for k in kinds if k[0] == "103"], kinds
    # Job 101 (30 of 80 GiB) is under half, but a job that never computes gets the idle finding only.
    assert ("101", "memory_headroom") not in kinds  # an unused job gets the idle finding only
    html = (tmp_path / "f.html").read_text()
    assert "<svg" in html and "node-idle gpu 0 (job 101)" in html

    text = fleet(cluster)
    assert text.returncode == 0, text.stderr
    assert "6 GPUs on 3 nodes; 3 jobs of 3 users held 6 of them" in text.stdout
    assert text.stdout.index("101") < text.stdout.index("102") < text.stdout.index("103")
    assert "[idle_allocation] job 101 (alice) held 2 GPUs idle" in text.stdout


def test_fleet_reads_dcgm_profiling_metrics(cluster):
    """No DCGM_FI_DEV_GPU_UTIL for the selection: the engine-active ratio stands in."""
    out = fleet(cluster, "--json", "--selector", 'exporter="dcgm"')
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [j["name"] for j in report["jobs"]] == ["103"]
    job = report["jobs"][0]
    assert job["busy_gpu_hours"] / job["gpu_hours"] == pytest.approx(0.92, abs=0.02)
    assert any("DCGM_FI_PROF_GR_ENGINE_ACTIVE" in g for g in report["gaps"]), report["gaps"]


def test_fleet_bad_input(cluster):
    sat = saturate_cmd()
    down = subprocess.run([*sat, "fleet", "--prometheus", f"http://127.0.0.1:{free_port()}",
                           "--since", "1min", "--timeout", "2s"], capture_output=True, text=True)
    assert down.returncode == 2
    assert "cannot reach Prometheus at http://127.0.0.1:" in down.stderr
    # An exporter's address is not a Prometheus server.
    wrong = subprocess.run([*sat, "fleet", "--prometheus",
                            f"http://127.0.0.1:{cluster['exporters'][0]}", "--since", "1min"],
                           capture_output=True, text=True)
    assert wrong.returncode == 2
    assert "is not Prometheus' API" in wrong.stderr, wrong.stderr
    # A server that accepts the connection and never answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        slow = subprocess.run([*sat, "fleet", "--prometheus",
                               f"http://127.0.0.1:{silent.getsockname()[1]}", "--since", "1min",
                               "--timeout", "1s"], capture_output=True, text=True, timeout=30)
    assert slow.returncode == 2
    assert "did not answer within 1 s (--timeout)" in slow.stderr, slow.stderr
    none = fleet(cluster, "--selector", 'Hostname="nowhere"')
    assert none.returncode == 2
    assert 'no `DCGM_FI_DEV_GPU_UTIL{Hostname="nowhere"}` (nor' in none.stderr
    bad = fleet(cluster, "--selector", "Hostname=")
    assert bad.returncode == 2 and "Prometheus rejected" in bad.stderr, bad.stderr
    usage = subprocess.run([*sat, "fleet"], capture_output=True, text=True)
    assert usage.returncode == 2 and "--prometheus URL is required" in usage.stderr


def test_fleet_says_what_is_missing(cluster):
    """An exporter that stops: its node's data is partial, and the report says so."""
    victim = cluster["procs"][2]  # node-ok
    victim.terminate()
    victim.wait(timeout=10)
    port = cluster["port"]
    wait_for("Prometheus to see node-ok down",
             lambda: api(port, "query", query='up{job="saturate"} == 0')["result"], 30)
    time.sleep(4)
    out = fleet(cluster, "--json")
    assert out.returncode == 0, out.stderr
    gaps = json.loads(out.stdout)["gaps"]
    assert any("node-ok: GPU samples for" in g for g in gaps), gaps
    assert any(f"exporter 127.0.0.1:{cluster['exporters'][2]} (scrape job saturate) was down"
               in g for g in gaps), gaps
