"""Jobs under a real single-host Slurm cluster (scripts/slurm-cluster.sh: munged,
slurmctld and slurmd for this host, state in a temp dir, 127.0.0.1).

- What Slurm tells a batch script and what it tells each task of an srun step:
  the facts saturate's rank detection (src/base/rank_env.h) relies on.
- `srun -n 2 saturate watch -- python slurm_train.py` (a DDP script that knows
  nothing about saturate, rank 1 slow in its data path): each rank records into
  RUN/rank-<r>/, the node's samples are written once into RUN/node-<host>/, and
  `saturate report RUN` names rank 1 as the straggler.

The cluster needs root and the Debian packages slurm-wlm and munge
(scripts/install-deps.sh). Without them the module skips, with the script's
reason (CI prints it: pytest -rs); with SATURATE_REQUIRE_SLURM=1 it fails instead.
"""

import glob
import json
import os
import re
import shlex
import subprocess

import pytest

from conftest import REPO, free_port, saturate_cmd, torch2_python

SCRIPT = os.path.join(REPO, "scripts", "slurm-cluster.sh")
TRAIN = os.path.join(REPO, "tests", "ranks", "slurm_train.py")
JOB_TIMEOUT = 120
VARS = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_ID")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The cluster's environment for sbatch/srun ({..., SLURM_CONF}); stopped at the
    end of the module, whatever happened."""
    state = tmp_path_factory.mktemp("slurm")
    try:
        r = subprocess.run(["bash", SCRIPT, "start", str(state)], capture_output=True, text=True,
                           timeout=90)
        exports = [line for line in r.stdout.splitlines() if line.startswith("export SLURM_CONF=")]
        if r.returncode != 0 or not exports:
            why = f"scripts/slurm-cluster.sh start: exit {r.returncode}\n{r.stdout}{r.stderr}"
            if os.environ.get("SATURATE_REQUIRE_SLURM") == "1":
                pytest.fail(why)
            pytest.skip(why)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "SATURATE_")) and k != "PYTHONPATH"}
        env["SLURM_CONF"] = exports[-1].split("=", 1)[1]
        yield env
    finally:
        stop = subprocess.run(["bash", SCRIPT, "stop", str(state)], capture_output=True, text=True,
                              timeout=60)
        print(stop.stdout, stop.stderr)


def sbatch(slurm, workdir, body, ntasks=2, check=True):
    """Runs BODY as a batch script of NTASKS tasks and waits for it; returns
    (exit status, sbatch's and the job's output)."""
    script, out = workdir / "job.sh", workdir / "job.out"
    script.write_text(f"#!/bin/bash\nset -eu\n{body}\n")
    r = subprocess.run(["sbatch", "--wait", f"--ntasks={ntasks}", f"--output={out}",
                        f"--chdir={workdir}", "--time=5", str(script)],
                       env=slurm, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    output = f"{r.stdout}{r.stderr}\n{out.read_text() if out.exists() else ''}"
    assert r.returncode == 0 or not check, f"sbatch exit {r.returncode}\n{output}"
    return r.returncode, output


def test_slurm_tells_tasks_from_the_batch_script(slurm, tmp_path):
    """SLURM_STEP_NUM_TASKS marks a task of a step. SLURM_PROCID is no such mark:
    the batch script has SLURM_PROCID=0 and SLURM_NTASKS=2 too."""
    show = tmp_path / "show.sh"
    show.write_text("for v in " + " ".join(VARS) + "; do\n"
                    '  if [[ -v $v ]]; then echo "$1 $v=${!v}"; else echo "$1 $v -"; fi\n'
                    "done\n")
    _, out = sbatch(slurm, tmp_path, f"bash {show} batch\n"
                                     f"srun bash -c 'bash {show} task-$SLURM_PROCID'\n"
                                     f"srun -n 1 bash -c 'bash {show} one-$SLURM_PROCID'")
    seen = {}
    for line in out.splitlines():
        m = re.fullmatch(r"(\S+) (SLURM_\w+)(?:=(.*)| -)", line)
        if m:
            seen.setdefault(m[1], {})[m[2]] = m[3]
    print(json.dumps(seen, indent=1))  # the facts, in the test log
    assert set(seen) == {"batch", "task-0", "task-1", "one-0"}, out

    batch = seen["batch"]
    assert batch["SLURM_STEP_NUM_TASKS"] is None and batch["SLURM_STEP_ID"] is None
    assert batch["SLURM_NTASKS"] == "2"
    assert batch["SLURM_PROCID"] == "0" and batch["SLURM_LOCALID"] == "0"  # yet not a rank

    step_ids = set()
    for r in (0, 1):
        task = seen[f"task-{r}"]
        assert task["SLURM_PROCID"] == task["SLURM_LOCALID"] == str(r)  # one node
        assert task["SLURM_NTASKS"] == task["SLURM_STEP_NUM_TASKS"] == "2"
        step_ids.add(task["SLURM_STEP_ID"])
    assert len(step_ids) == 1 and None not in step_ids  # both tasks of one step

    # A 1-task step inside the 2-task job: the step's size, not the job's.
    one = seen["one-0"]
    assert one["SLURM_NTASKS"] == one["SLURM_STEP_NUM_TASKS"] == "1"
    assert one["SLURM_STEP_ID"] not in (None, *step_ids)


@pytest.fixture(scope="module")
def watched_ranks(slurm, tmp_path_factory):
    """`srun -n 2 saturate watch --out RUN -- python slurm_train.py` in a batch job
    (rank 1 sleeps 30 ms in its data path each step); returns (RUN, exit status,
    job output). The tests judge the exit status."""
    python = torch2_python()
    work = tmp_path_factory.mktemp("slurm-watch")
    run = work / "run"
    watch = shlex.join([*saturate_cmd(), "watch", "--no-gpu", "--no-view", "--out", str(run)])
    # --kill-on-bad-exit: a rank that fails ends the step (its peer would wait for
    # it in the process group until the test's timeout).
    rc, out = sbatch(slurm, work, f"export MASTER_ADDR=127.0.0.1 MASTER_PORT={free_port()}\n"
                                  "export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1\n"
                                  f"srun -n 2 --kill-on-bad-exit=1 {watch} -- "
                                  f"{shlex.join([python, TRAIN])} --steps 40 --slow-rank 1",
                     check=False)
    return run, rc, out


def meta_line(path):
    with open(path) as f:
        meta = json.loads(f.readline())
    assert meta["ph"] == "M", meta
    return meta


def test_each_srun_task_records_its_rank_and_the_node_once(watched_ranks):
    run, rc, out = watched_ranks
    assert rc == 0, f"the job failed: exit {rc}\n{out}"
    assert "rank 0/2" in out and "rank 1/2" in out, out  # the job itself ran
    pids, hosts = {}, set()
    for r in (0, 1):
        files = glob.glob(str(run / f"rank-{r}" / "spans-*-auto.jsonl"))
        assert len(files) == 1, (r, os.listdir(run), out)
        meta = meta_line(files[0])
        rank = meta["rank"]
        assert {k: rank[k] for k in ("rank", "local_rank", "world_size", "launcher")} == {
            "rank": r, "local_rank": r, "world_size": 2, "launcher": "slurm"}, rank
        assert rank["host"], rank
        hosts.add(rank["host"])
        pids[r] = meta["pid"]
    assert len(hosts) == 1
    (host,) = hosts
    assert not glob.glob(str(run / "rank-*" / "samples.jsonl"))  # ranks do not sample the node
    assert sorted(os.path.basename(p) for p in glob.glob(str(run / "node-*"))) == [f"node-{host}"]
    node = run / f"node-{host}"
    with open(node / "meta.json") as f:
        meta = json.load(f)
    assert meta["pid"] == pids[0], (meta["pid"], pids)  # written by local rank 0's watch
    with open(node / "samples.jsonl") as f:
        samples = [json.loads(line) for line in f]  # one writer: every line whole
    assert len(samples) >= 5


def names_rank_1_as_straggler(finding):
    """A straggler finding whose title says "rank 1", or whose evidence has a
    rank-named item worth 1 (evidence: [{"key", "value", ...}] or a mapping)."""
    if "straggler" not in json.dumps(finding).lower():
        return False
    if re.search(r"\brank[ _-]?1\b", finding.get("title", "").lower()):
        return True
    evidence = finding.get("evidence") or []
    items = (evidence.items() if isinstance(evidence, dict)
             else [(e.get("key", ""), e.get("value")) for e in evidence if isinstance(e, dict)])
    return any("rank" in str(key).lower() and value in (1, "1") for key, value in items)


def test_report_names_the_slow_rank_as_the_straggler(watched_ranks):
    run, rc, out = watched_ranks
    assert rc == 0, f"the job failed: exit {rc}\n{out}"
    r = subprocess.run([*saturate_cmd(), "report", str(run), "--no-html"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}{r.stderr}"
    with open(run / "findings.json") as f:
        findings = json.load(f)["findings"]
    assert any(names_rank_1_as_straggler(f) for f in findings), json.dumps(findings, indent=1)
