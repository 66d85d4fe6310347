"""saturate.watch around a block of code."""

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

import saturate
from conftest import fake_nvml, saturate_cmd


def test_watch_records_this_process_and_the_host(tmp_path):
    run = tmp_path / "run"
    with saturate.watch(run, interval=0.02, gpus=False) as w:
        x = sum(i * i for i in range(300_000))  # some CPU to see
        time.sleep(0.2)
    assert x > 0
    meta = json.loads((run / "meta.json").read_text())
    assert meta["exit_code"] == 0 and meta["interval_ns"] == 20_000_000
    assert meta["gpu_status"] == "GPU sampling off"
    lines = [json.loads(l) for l in (run / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == meta["samples"] >= 5
    assert lines[-1]["tree"]["members"][0]["pid"] == meta["pid"]
    assert w.stats()["samples"] == meta["samples"]


def test_watch_without_a_driver_says_why_and_serves_prometheus():
    with saturate.watch(interval=0.02, prometheus=0,
                        nvml_library="/nonexistent/libnvidia-ml.so.1") as w:
        assert w.gpu_status.startswith("no GPUs: no NVIDIA driver")
        assert w.metrics_url.startswith("http://127.0.0.1:")
        time.sleep(0.1)
        page = urllib.request.urlopen(w.metrics_url, timeout=2).read().decode()
        assert "saturate_host_cpu_pct" in page and "saturate_process_tree_rss_bytes" in page
        assert w.latest()["gpus"] == []
        assert "t=" in w.render() and "host" in w.render(screen=True)


def test_an_exception_in_the_block_is_recorded(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with saturate.watch(tmp_path / "r", interval=0.01, gpus=False):
            1 / 0
    assert json.loads((tmp_path / "r" / "meta.json").read_text())["exit_code"] == 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="interval"):
        saturate.watch(interval=0)
    with pytest.raises(ValueError, match="listen address"):
        saturate.watch(prometheus="nope", gpus=False).start()


def _watch_fake_gpus(tmp_path, gpm):
    """`saturate watch` over a 2 s child with the fake NVML: GPUs 100% busy,
    GPU 0's GPM counters as FAKE_NVML_GPM says (src/watch/testing/fake_nvml.cc),
    then `saturate report` on the run. Returns (samples, findings.json, log)."""
    run = tmp_path / "run"
    env = dict(os.environ, FAKE_NVML_UTIL="100", FAKE_NVML_GPM=gpm)
    watch = subprocess.run(
        saturate_cmd() + ["watch", "--no-auto", "--nvml-library", fake_nvml(), "--interval",
                          "150ms", "-o", str(run), "--", sys.executable, "-c",
                          "import time; time.sleep(2)"],
        env=env, capture_output=True, text=True, timeout=60)
    assert watch.returncode == 0, watch.stderr
    report = subprocess.run(saturate_cmd() + ["report", str(run)], capture_output=True,
                            text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    samples = [json.loads(l) for l in (run / "samples.jsonl").read_text().splitlines()]
    findings = json.loads((run / "findings.json").read_text())
    return samples, findings, watch.stderr


def test_gpm_counters_recorded_shown_and_diagnosed_as_launch_bound(tmp_path):
    # The fake's defaults: SM active 20%, tensor 2% on GPU 0 (GPU 1 lacks GPM).
    samples, findings, log = _watch_fake_gpus(tmp_path, gpm="")
    gpm = [s["gpus"][0]["gpm"] for s in samples if "gpm" in s["gpus"][0]]
    assert len(gpm) >= 5
    assert gpm[-1]["sm_active_pct"] == 20 and gpm[-1]["tensor_active_pct"] == 2
    assert gpm[-1]["pcie_rx_bytes_per_s"] == 200 * 1024 * 1024
    assert "nvlink_rx_bytes_per_s" not in gpm[-1]  # the fake is a PCIe card
    assert not any("gpm" in s["gpus"][1] for s in samples)
    assert "sm 20% tensor 2% dram 30%" in log
    causes = {x["cause"]: x for x in findings["findings"]}
    x = causes["launch_bound"]
    assert "only 20% of its SMs" in x["title"] and "CUDA graphs" in x["fix"]
    assert {e["key"]: e["value"] for e in x["evidence"]}["sm_active_pct"] == 20
    assert findings["features"]["gpm_sm_active_pct"] == 20
    assert "model_config" not in causes  # idle SMs, not idle tensor cores


def test_gpm_tensor_cores_idle_while_the_sms_compute(tmp_path):
    _, findings, _ = _watch_fake_gpus(tmp_path, gpm="2=92,5=0.5")
    causes = {x["cause"]: x for x in findings["findings"]}
    assert "launch_bound" not in causes
    x = causes["model_config"]
    assert x["title"].startswith("Tensor cores idle (0.5% active)"), x["title"]
    assert "channels_last" in x["fix"] and "not recorded" in x["fix"]


def test_tensor_cores_idle_under_autocast_names_the_weights_to_change(tmp_path):
    """The whole chain on an unmodified script: the auto-instrumentation sees
    torch.autocast (bf16, on the CPU here) and the model's weights, the fake GPU's
    GPM counters show idle tensor cores, and doctor's finding says the 16-bit model
    misses them and which weights to change (tests/auto/healthy.py: three NCHW
    convolutions and a Linear(64, 10))."""
    run = tmp_path / "run"
    env = dict(os.environ, FAKE_NVML_UTIL="100", FAKE_NVML_GPM="2=92,5=0.5",
               PYTHONPATH=os.pathsep.join(sys.path))
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "tests", "auto", "healthy.py")
    doctor = subprocess.run(
        saturate_cmd() + ["doctor", "--nvml-library", fake_nvml(), "--interval", "100ms",
                          "--out", str(run), "--", sys.executable, script, "--precision",
                          "autocast", "--steps", "12", "--batch-size", "8",
                          "--log-every", "1000"],
        env=env, capture_output=True, text=True, timeout=180)
    assert doctor.returncode == 0, doctor.stderr
    findings = json.loads((run / "findings.json").read_text())
    assert findings["features"]["precision_bits"] == 16, findings["features"]
    x = {f["cause"]: f for f in findings["findings"]}["model_config"]
    assert "although the model runs in 16-bit" in x["title"], x["title"]
    assert "not recorded" not in x["fix"] and "left in fp32" in x["fix"], x["fix"]
    assert "(3 of its 3 convolution weights are NCHW)" in x["fix"], x["fix"]
    assert "(1 of its 1 Linear and Embedding weights" in x["fix"], x["fix"]


def test_without_gpm_nothing_is_guessed(tmp_path):
    samples, findings, log = _watch_fake_gpus(tmp_path, gpm="off")
    assert not any("gpm" in g for s in samples for g in s["gpus"])
    assert " sm " not in log
    causes = {x["cause"] for x in findings["findings"]}
    assert not causes & {"launch_bound", "model_config"}, causes
