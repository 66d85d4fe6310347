"""saturate.phase / saturate.step / saturate.trace, and the loader's spans."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import saturate
from conftest import run_python


def read_events(run_dir):
    """Every line of every spans file of `run_dir`, parsed."""
    events = []
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("spans-") and name.endswith(".jsonl"):
            with open(os.path.join(run_dir, name)) as f:
                events += [json.loads(line) for line in f]
    return events


def spans(events, name=None):
    return [e for e in events if e["ph"] == "X" and (name is None or e["name"] == name)]


def run_traced(script, run_dir, *args):
    """Runs `script` in a fresh interpreter with SATURATE_RUN_DIR=run_dir."""
    env = {"SATURATE_RUN_DIR": str(run_dir)}
    r = run_python(["-c", textwrap.dedent(script), *map(str, args)], env=env)
    assert r.returncode == 0, r.stderr
    return r


PHASES = """
    import time, saturate
    assert saturate.trace.enabled()
    with saturate.phase("outer"):
        with saturate.phase("inner"):
            time.sleep(0.002)

    @saturate.phase("decorated")
    def double(x):
        "Doubles x."
        return 2 * x

    assert double(3) == 6 and double(4) == 8
    assert double.__name__ == "double" and double.__doc__ == "Doubles x."
    try:
        with saturate.phase("raises"):
            raise KeyError("boom")
    except KeyError:
        pass
    print(saturate.step(), saturate.step())
"""


def test_phases_and_steps_are_recorded_from_the_environment(tmp_path):
    run = tmp_path / "run"
    r = run_traced(PHASES, run)
    assert r.stdout.split() == ["1", "2"]
    events = read_events(run)
    meta = events[0]
    assert meta["ph"] == "M" and meta["clock"] == "CLOCK_MONOTONIC" and meta["pid"] > 0
    outer, inner = spans(events, "outer")[0], spans(events, "inner")[0]
    assert inner["dur_ns"] >= 2_000_000
    assert outer["ts_ns"] <= inner["ts_ns"]
    assert inner["ts_ns"] + inner["dur_ns"] <= outer["ts_ns"] + outer["dur_ns"]
    assert outer["cat"] == "user" and outer["tid"] == inner["tid"] and "args" not in outer
    assert len(spans(events, "decorated")) == 2
    assert len(spans(events, "raises")) == 1  # the span ends when the exception leaves it
    assert [e["step"] for e in events if e["ph"] == "step"] == [1, 2]


def test_nothing_is_recorded_without_a_run_directory(tmp_path):
    script = """
        import saturate
        with saturate.phase("forward"):
            pass
        assert not saturate.trace.enabled() and saturate.trace.run_dir() == ""
        print(saturate.step())
    """
    env = dict(SATURATE_RUN_DIR="")
    r = run_python(["-c", textwrap.dedent(script)], env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"
    assert os.listdir(tmp_path) == []


def test_start_flush_stop_in_process(tmp_path):
    run = tmp_path / "run"
    saturate.trace.start(run)
    try:
        assert saturate.trace.enabled() and saturate.trace.run_dir() == str(run)
        with saturate.phase("checkpoint", category="checkpoint") as p:
            assert p.name == "checkpoint" and p.category == "checkpoint"
        saturate.trace.flush()
        (span,) = spans(read_events(run))
        assert span["name"] == "checkpoint" and span["cat"] == "checkpoint"
        assert span["pid"] == os.getpid()
        assert 0 < span["ts_ns"] <= saturate.trace.now_ns()
    finally:
        saturate.trace.stop()
    assert not saturate.trace.enabled()
    with saturate.phase("after_stop"):
        pass
    assert spans(read_events(run), "after_stop") == []


def test_bad_use_is_a_clear_error():
    with pytest.raises(ValueError, match="category 'gpu'"):
        saturate.phase("x", category="gpu")
    p = saturate.phase("once")
    with p:
        with pytest.raises(ValueError, match="already entered"):
            p.__enter__()
    with pytest.raises(saturate.errors.InvalidArgumentError, match="empty"):
        saturate.trace.start("")


LOADER = """
    import sys, saturate
    loader = saturate.Loader(sys.argv[1], batch_size=10, shuffle=False, threads=2)
    batches = sum(1 for _ in loader)
    print(batches, len(loader))
    del loader  # the last counters record
"""


def test_the_loader_records_waits_loads_and_counters(digits, tmp_path):
    run = tmp_path / "run"
    r = run_traced(LOADER, run, digits)
    batches, per_epoch = map(int, r.stdout.split())
    assert batches == per_epoch == 11  # 101 digits
    events = read_events(run)
    waits = spans(events, "data_wait")
    assert sorted(w["args"]["batch"] for w in waits) == list(range(11))
    assert all(w["cat"] == "loader" and w["dur_ns"] >= 0 for w in waits)
    loads = spans(events, "load_batch")
    # The workers may start on epoch 1 once epoch 0 has been handed out.
    assert sum(s["args"]["samples"] for s in loads if s["args"]["epoch"] == 0) == 101
    assert {s["tid"] for s in loads}.isdisjoint({w["tid"] for w in waits})
    counters = [e["args"] for e in events if e["ph"] == "C" and e["name"] == "loader"]
    assert len(counters) >= 2
    assert counters[-1]["samples"] >= 101 and counters[-1]["batches_delivered"] == 11
    assert counters[-1]["batch_size"] == 10 and counters[-1]["threads"] == 2


def bundled_cli():
    exe = os.path.join(os.path.dirname(saturate.__file__), "bin", "saturate")
    return exe if os.path.exists(exe) else shutil.which("saturate")


@pytest.mark.skipif(bundled_cli() is None, reason="the saturate command is not bundled")
def test_export_to_chrome_trace(tmp_path):
    run = tmp_path / "run"
    run_traced(PHASES, run)
    out = tmp_path / "trace.json"
    r = subprocess.run([bundled_cli(), "trace", "export", str(run), "--chrome", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    trace = json.loads(out.read_text())
    assert trace["displayTimeUnit"] == "ms"
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"outer", "inner", "decorated", "step 1", "step 2", "process_name"} <= names
    inner = next(e for e in trace["traceEvents"] if e["name"] == "inner")
    assert inner["ph"] == "X" and inner["dur"] >= 2000.0  # microseconds
