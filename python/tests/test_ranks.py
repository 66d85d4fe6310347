"""Many ranks, many nodes (issue 21, docs/ranks.md): unmodified DistributedDataParallel
jobs (tests/ranks/ddp_job.py) under the real torchrun with Gloo on CPU, run by
`saturate doctor`, with planted causes: a rank whose data path is slow (a straggler),
rank 0 checkpointing every step, a rank that leaves mid-epoch, a healthy job, and a
two-"node" job (two torchrun agents on 127.0.0.1, each under its own saturate watch
with its own hostname), merged, also after one node's clock is moved by 40 s.
"""

import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO, free_port, saturate_cmd, torch2_python, torchrun

JOB = os.path.join(REPO, "tests", "ranks", "ddp_job.py")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SATURATE_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def doctor(run_dir, nproc, *job_args, expect_rc=0):
    python = torch2_python()
    command = [*torchrun(python), f"--nproc_per_node={nproc}", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), JOB, *job_args]
    r = subprocess.run([*saturate_cmd(), "doctor", "--no-gpu", "--out", str(run_dir), "--",
                        *command], env=clean_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == expect_rc, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    with open(os.path.join(run_dir, "findings.json")) as f:
        return json.load(f), r.stdout


def straggler_findings(report):
    return [f for f in report["findings"]
            if f["evidence"] and f["evidence"][0]["key"] == "straggler_rank"]


def test_a_slow_rank_is_named_with_what_the_others_lose(tmp_path):
    report, out = doctor(tmp_path / "run", 4, "--slow-rank", "3", "--slow-ms", "40")
    for r in range(4):  # each rank recorded into its own folder; the node once, at the root
        assert list((tmp_path / "run" / f"rank-{r}").glob("spans-*-auto.jsonl")), r
    assert not list((tmp_path / "run").glob("rank-*/samples.jsonl"))
    ranks = report["features"]["ranks"]
    assert ranks["world_size"] == 4 and ranks["straggler"] == 3
    assert ranks["clock_method"] == "one host"
    assert [row["steps"] for row in ranks["rows"]] == [29] * 4
    (finding,) = straggler_findings(report)
    assert finding["cause"] == "input_pipeline", finding
    evidence = {e["key"]: e["value"] for e in finding["evidence"]}
    assert evidence["straggler_rank"] == 3
    # 40 ms of extra data loading a step: the others wait most of it at the all-reduce.
    assert 20 <= evidence["others_wait_ms_per_step"] <= 60, evidence
    assert "Straggler: rank 3" in finding["title"] and "the other 3 ranks wait" in finding["title"]
    assert "rank 3 is the straggler" in out
    html = (tmp_path / "run" / "report.html").read_text()
    assert 'id="rank-steps"' in html and "straggler" in html

    # A rank killed before it wrote anything, another cut mid-line: the report shows the rest.
    broken = tmp_path / "broken"
    shutil.copytree(tmp_path / "run", broken)
    shutil.rmtree(broken / "rank-2")
    (spans,) = (broken / "rank-1").glob("spans-*-auto.jsonl")
    text = spans.read_bytes()
    spans.write_bytes(text[: len(text) - 40])
    report2, stderr = report_of(broken)
    assert "rank-2/ is missing (of 4 ranks)" in stderr and "torn last line" in stderr, stderr
    rows = report2["features"]["ranks"]["rows"]
    assert rows[2]["note"] == "rank directory missing" and rows[1]["steps"] >= 28
    assert report2["features"]["ranks"]["straggler"] == 3


def test_a_slow_rank_is_named_when_the_model_has_buffers(tmp_path):
    """BatchNorm's running stats: DDP broadcasts them at the start of every
    forward, so the others wait for the slow rank there, before the gradients'
    all-reduce; that broadcast is recorded as a collective."""
    report, _ = doctor(tmp_path / "run", 2, "--slow-rank", "1", "--slow-ms", "40", "--batchnorm",
                       "--steps", "20")
    assert report["features"]["ranks"]["straggler"] == 1, report["features"]["ranks"]
    (finding,) = straggler_findings(report)
    assert finding["cause"] == "input_pipeline", finding
    evidence = {e["key"]: e["value"] for e in finding["evidence"]}
    assert 20 <= evidence["others_wait_ms_per_step"] <= 60, evidence
    (spans,) = (tmp_path / "run" / "rank-0").glob("spans-*-auto.jsonl")
    assert "DDP broadcast_buffers" in spans.read_text()
    # Rank 0 waits inside that broadcast: its own "communication" would count the
    # straggler's cost again; the collectives themselves are cheap.
    assert report["findings"][0] is finding, report["findings"][0]
    assert not [f for f in report["findings"] if f["cause"] == "communication"], report


def test_rank_zero_checkpointing_while_the_others_wait(tmp_path):
    report, _ = doctor(tmp_path / "run", 3, "--save-every", "1")
    (finding,) = straggler_findings(report)
    assert finding["cause"] == "checkpoint_stall", finding
    assert finding["title"].startswith("Rank-0-only work: rank 0"), finding["title"]
    assert finding["sites"] and "ddp_job.py" in finding["sites"][0]["site"]


def test_a_rank_that_leaves_mid_epoch_is_named(tmp_path):
    report, _ = doctor(tmp_path / "run", 2, "--exit-rank", "1", "--exit-step", "10",
                       "--timeout-s", "20", expect_rc=1)
    (dead,) = [f for f in report["findings"] if f["cause"] == "idle_allocation"]
    assert "rank 1 exited" in dead["title"] and "after step 10" in dead["title"], dead["title"]
    assert {e["key"]: e["value"] for e in dead["evidence"]}["rank"] == 1


def test_a_large_all_reduce_every_step_is_communication(tmp_path):
    report, _ = doctor(tmp_path / "run", 2, "--sync-mb", "16")
    (comm,) = [f for f in report["findings"] if f["cause"] == "communication"]
    evidence = {e["key"]: e["value"] for e in comm["evidence"]}
    assert comm["title"].startswith("Collectives take"), comm["title"]
    assert abs(evidence["collective_mb_per_step"] - 16 * 2**20 / 1e6) < 0.01, evidence
    assert "no_sync()" in comm["fix"]


def test_a_healthy_job_has_no_rank_finding(tmp_path):
    report, _ = doctor(tmp_path / "run", 2, "--steps", "40")
    assert report["features"]["ranks"]["world_size"] == 2
    assert report["features"]["ranks"]["straggler"] is None
    assert not straggler_findings(report)
    assert not [f for f in report["findings"] if f["cause"] == "idle_allocation"]


def run_two_nodes(job_dir):
    """Two torchrun agents ("nodes" node-a and node-b, one rank each) on 127.0.0.1,
    each under its own saturate watch writing a per-node run directory of JOB_DIR."""
    python = torch2_python()
    port = free_port()
    procs = []
    for node in (0, 1):
        host = "node-" + "ab"[node]
        command = [*torchrun(python), "--nnodes=2", f"--node_rank={node}", "--nproc_per_node=1",
                   "--master_addr", "127.0.0.1", "--master_port", str(port), JOB,
                   "--slow-rank", "1", "--slow-ms", "40"]
        procs.append(subprocess.Popen(
            [*saturate_cmd(), "watch", "--no-gpu", "--no-view", "--out", str(job_dir / host), "--",
             *command], env=clean_env(SATURATE_HOSTNAME=host), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    for p in procs:
        out = p.communicate(timeout=240)[0]
        assert p.returncode == 0, out


def report_of(job_dir):
    r = subprocess.run([*saturate_cmd(), "report", str(job_dir), "--no-html"],
                       env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(job_dir / "findings.json") as f:
        return json.load(f), r.stderr


def shift_clock(node_dir, delta_ns):
    """What a node whose clock reads `delta_ns` ahead would have written."""
    meta_path = node_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    for key in ("start_unix_ns", "end_unix_ns"):
        meta[key] += delta_ns
    meta_path.write_text(json.dumps(meta))
    for spans in node_dir.glob("rank-*/spans-*.jsonl"):
        lines = spans.read_text().splitlines()
        out = []
        for line in lines:
            event = json.loads(line)
            if event.get("ph") == "M" and "unix_ns" in event:
                event["unix_ns"] += delta_ns
            out.append(json.dumps(event))
        spans.write_text("\n".join(out) + "\n")


def test_two_nodes_merge_onto_one_axis_even_with_a_skewed_clock(tmp_path):
    job = tmp_path / "job"
    run_two_nodes(job)
    assert (job / "node-a" / "rank-0").is_dir() and (job / "node-b" / "rank-1").is_dir()
    report, _ = report_of(job)
    ranks = report["features"]["ranks"]
    assert ranks["hosts"] == ["node-a", "node-b"]
    assert ranks["clock_method"] in ("collectives", "backward"), ranks["clock_method"]
    # One real clock: the correction and the residual skew are small.
    assert abs(ranks["rows"][1]["clock_offset_ms"]) < 20, ranks["rows"][1]
    assert ranks["residual_skew_ms"] < 20
    assert ranks["straggler"] == 1

    skewed = tmp_path / "skewed"
    shutil.copytree(job, skewed)
    shift_clock(skewed / "node-b", 40 * 10**9)
    report2, stderr = report_of(skewed)
    ranks2 = report2["features"]["ranks"]
    assert abs(ranks2["rows"][1]["clock_offset_ms"] + 40_000) < 20, ranks2["rows"][1]
    assert ranks2["residual_skew_ms"] < 20
    assert ranks2["straggler"] == 1
    assert "host node-b's clock is 40.0" in stderr and "ahead" in stderr, stderr
    # The steps line up as before the shift.
    for row, row2 in zip(ranks["rows"], ranks2["rows"]):
        assert row["steps"] == row2["steps"]
