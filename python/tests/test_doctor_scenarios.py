"""saturate doctor end to end: real CPU training jobs (doctor_scenario.py) that
create one bottleneck each. For each, doctor's top finding must name it, and
the fix it recommends, applied, must cut the time that cause costs.

These run real work on the machine's cores (a few seconds each), so they
assert the cause and the direction of the change, not exact numbers.
"""

import contextlib
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, "doctor_scenario.py")
REPO = os.path.dirname(os.path.dirname(HERE))


def doctor(run_dir, scenario_args, *doctor_args, expect_rc=0):
    """Runs `saturate doctor` on the scenario; returns (findings.json, stdout)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # --no-auto: these scenarios are instrumented explicitly and test the rules
    # on that record; the auto-instrumentation has its own tests (test_auto.py),
    # and its few microseconds per step would shift the phase shares of the
    # sub-millisecond steps some scenarios make on purpose.
    r = subprocess.run(
        [sys.executable, "-m", "saturate", "doctor", "--no-gpu", "--no-auto", "--out",
         str(run_dir), *doctor_args, "--", sys.executable, SCENARIO, *scenario_args],
        env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == expect_rc, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    with open(os.path.join(run_dir, "findings.json")) as f:
        return json.load(f), r.stdout


def top(findings):
    assert findings["findings"], f"no finding: {json.dumps(findings, indent=1)[:3000]}"
    return findings["findings"][0]


def check_fix_trials(check):
    """--check-fix's verdict and what each of its trials measured, for a failure message."""
    with open(os.path.join(check["tune_dir"], "tune.json")) as f:
        tune = json.load(f)
    keys = ("config", "stage", "status", "throughput", "unit", "steps", "noise_pct", "wall_s",
            "cpu_cores", "ended_by", "exit_code")
    trials = [{k: t.get(k) for k in keys} for t in tune.get("trials", [])]
    return json.dumps({"check": check, "verify": tune.get("verify"), "trials": trials}, indent=1)


def lost_pct(findings, cause):
    return sum(f["time_lost_pct"] for f in findings["findings"] if f["cause"] == cause)


@contextlib.contextmanager
def busy_loops(n):
    """n processes outside the watched tree, each spinning on a core, while the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


@pytest.fixture(scope="module")
def real_photos(tmp_path_factory):
    """150 ImageNet-like JPEGs (short side 300-500 px), packed: decoding is real work."""
    import saturate

    root = tmp_path_factory.mktemp("real_photos")
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make-photo-dataset"),
                    "--train", "150", "--val", "0", str(root / "folder")],
                   check=True, capture_output=True, timeout=300)
    out = str(root / "photos.sat")
    saturate.pack(str(root / "folder" / "train"), out)
    return out


def test_one_loader_thread_is_an_input_pipeline_bottleneck(tmp_path, real_photos):
    args = ["--source", "loader", "--data", real_photos, "--batch-size", "16"]
    before, stdout = doctor(tmp_path / "slow", [*args, "--threads", "1"])
    finding = top(before)
    assert finding["cause"] == "input_pipeline", stdout
    assert finding["fix_value"] and "threads" in finding["fix_value"], finding
    threads = int(finding["fix_value"]["threads"])
    assert threads > 1, finding
    assert "input_pipeline" in stdout and "fix" in stdout
    assert os.path.getsize(tmp_path / "slow" / "report.html") > 1000

    after, _ = doctor(tmp_path / "fixed", [*args, "--threads", str(min(threads, os.cpu_count()))])
    assert lost_pct(after, "input_pipeline") < lost_pct(before, "input_pipeline"), (before, after)


def test_a_throttled_file_is_io_bound(tmp_path):
    args = ["--workdir", str(tmp_path), "--batch-size", "8"]
    before, stdout = doctor(tmp_path / "slow", [*args, "--source", "pipe", "--mbps", "0.5"])
    assert top(before)["cause"] == "io_bound", stdout
    # The fix: the same records from a local copy.
    after, _ = doctor(tmp_path / "fixed", [*args, "--source", "file"])
    assert lost_pct(after, "io_bound") < lost_pct(before, "io_bound") / 2, (before, after)


def test_a_tiny_batch_leaves_the_device_underused(tmp_path):
    args = ["--source", "memory", "--model", "mlp"]
    before, stdout = doctor(tmp_path / "tiny", [*args, "--batch-size", "1"])
    finding = top(before)
    assert finding["cause"] == "parallelism", stdout
    # No saturate.Loader here, so doctor knows the factor, not the batch size: 1 x factor.
    batch = int(finding["fix_value"]["batch_size_factor"])
    assert batch > 1, finding
    after, _ = doctor(tmp_path / "larger", [*args, "--batch-size", str(batch)])
    # The fix works: samples/s rise. (Not doctor's own loss estimate: without a
    # known batch size it assumes half of any step under 5 ms is operator
    # dispatch, and the larger batch's ~4 ms steps are still under that.)
    def samples_per_s(analysis, batch_size):
        features = analysis["features"]
        return features["steps"] * batch_size / features["active_s"]
    gain = samples_per_s(after, batch) / samples_per_s(before, 1)
    assert gain > 1.5, (gain, before["features"], after["features"])


def test_competing_load_is_cpu_contention(tmp_path, real_photos):
    # One loader thread: it needs ~60% of the job's CPU (0.7 ms a photo against ~8 ms of
    # compute per batch of 16), and with the cores shared among runnable threads it gets
    # half of what the load leaves the job, so training waits for data (46-54% of the step in
    # 4 runs). With a thread per core the loader's share matched its need, and the wait
    # wandered around doctor's 10% threshold (8.6-26% in 4 runs; 6% in one CI run).
    args = ["--source", "loader", "--data", real_photos, "--batch-size", "16", "--threads", "1"]
    with busy_loops(os.cpu_count()):
        before, stdout = doctor(tmp_path / "busy", args)
    assert top(before)["cause"] == "cpu_contention", stdout
    after, _ = doctor(tmp_path / "quiet", args)
    assert lost_pct(after, "cpu_contention") < lost_pct(before, "cpu_contention"), (before, after)


def test_others_slowing_the_steps_themselves_are_cpu_contention(tmp_path):
    """No data wait at all (batches from memory): the load slows the training
    compute itself. Doctor reads it from the training process's threads
    waiting for a CPU (schedstat), which the watcher records."""
    cores = os.cpu_count()
    args = ["--source", "memory", "--model", "conv", "--torch-threads", str(cores),
            "--seconds", "5"]
    with busy_loops(cores):
        before, stdout = doctor(tmp_path / "busy", args)
    finding = top(before)
    assert finding["cause"] == "cpu_contention", stdout
    evidence = {e["key"]: e["value"] for e in finding["evidence"]}
    # Twice as many runnable threads as cores: training waits about half its ready time.
    share = evidence["training_runq_wait_cores"] / (
        evidence["training_runq_wait_cores"] + evidence["training_cpu_cores"])
    assert 0.25 < share < 0.75, finding
    after, _ = doctor(tmp_path / "quiet", args)
    assert lost_pct(after, "cpu_contention") < lost_pct(before, "cpu_contention") / 2, (
        before, after)


def test_fail_on_gates_the_exit_code(tmp_path):
    args = ["--workdir", str(tmp_path), "--source", "pipe", "--mbps", "0.5", "--seconds", "3"]
    findings, stdout = doctor(tmp_path / "gated", args, "--fail-on", "io_bound>5%", expect_rc=1)
    assert "gate failed: io_bound" in stdout
    # The same run re-analysed with a gate it passes.
    r = subprocess.run([sys.executable, "-m", "saturate", "report", str(tmp_path / "gated"),
                        "--fail-on", "checkpoint_stall>50%"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert top(findings)["cause"] in r.stdout


def test_check_fix_applies_the_batch_fix_and_measures_it(tmp_path):
    """--check-fix: doctor's top finding (a tiny batch) maps to the script's own
    --batch-size flag; the A/B re-runs measure the gain the finding predicted."""
    findings, stdout = doctor(
        tmp_path / "tiny", ["--source", "memory", "--model", "mlp", "--batch-size", "1",
                            "--seconds", "4"],
        "--check-fix", "--check-seconds", "3", "--check-rounds", "1")
    finding = top(findings)
    assert finding["cause"] == "parallelism", stdout
    prediction, check = finding["prediction"], finding["check"]
    assert prediction["speedup"] > 1.2 and prediction["model"], prediction
    assert check["knob"] == "batch_size" and check["flag"] == "--batch-size", check
    assert check["from"] == "1" and int(check["to"]) == finding["fix_value"]["batch_size_factor"]
    # A batch of 1 -> 4..8 on this MLP gains well beyond the noise. (It measured 1.02x once, in
    # a full run on Nov 27; the trials' own numbers say why, should it again.)
    assert check["measured_speedup"] > 1.2 and check["reliable_gain"], check_fix_trials(check)
    assert not finding["demoted"]
    assert "check: batch_size 1 -> " in stdout
    with open(os.path.join(check["tune_dir"], "tune.json")) as f:
        tune = json.load(f)
    assert [t["config"]["batch_size"] for t in tune["trials"]][:2] == ["1", check["to"]]
    assert tune["verify"]["rounds"] == 1
