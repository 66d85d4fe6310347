"""saturate.watch around a block of code."""

import json
import time
import urllib.request

import pytest

import saturate


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
