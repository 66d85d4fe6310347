"""A hung rank reported while the job still runs (issue 21, docs/watch.md "Hung and
dead ranks"): a real torchrun DDP job on Gloo (tests/ranks/hang_job.py) in which rank 1
sleeps at step 8 while rank 0 blocks in the gradient all-reduce. `saturate watch
--hang-timeout 3s` must print a HANG line naming rank 1 with its Python stack, and
write RUN/hang.json, long before the process group's own timeout; then the job is
stopped and nothing of it is left running.

Needs the torch 2 environment (conftest.torch2_python: skipped locally without it).
"""

import json
import os
import queue
import signal
import subprocess
import threading
import time

from conftest import REPO, free_port, saturate_cmd, torch2_python

JOB = os.path.join(REPO, "tests", "ranks", "hang_job.py")
BUILD_CLI = os.path.join(REPO, "build", "ci", "tools", "saturate", "saturate")


def cli():
    """$SATURATE_CLI, else the build tree's binary, else the installed package's."""
    if os.environ.get("SATURATE_CLI"):
        return [os.environ["SATURATE_CLI"]]
    if os.access(BUILD_CLI, os.X_OK):
        return [BUILD_CLI]
    return saturate_cmd()


def clean_env():
    """This environment without saturate's own variables (pytest may itself run under
    saturate watch)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("SATURATE_") and k != "PYTHONPATH"}


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def lines_of(stream, out):
    for line in stream:
        out.put(line.rstrip("\n"))
    out.put(None)


def stop(proc, rank_pids):
    """Ends saturate's process group (saturate, torchrun), bounded, then checks that
    the ranks (torchrun starts them in sessions of their own) are gone too; returns
    the ones that were not, after killing them."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    deadline = time.monotonic() + 10
    while any(alive(p) for p in rank_pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in rank_pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    return left


def test_a_hung_rank_is_named_with_its_stack_while_the_job_runs(tmp_path):
    python = torch2_python()
    run = tmp_path / "run"
    command = [*cli(), "watch", "--out", str(run), "--no-view", "--no-gpu", "--hang-timeout", "3s",
               "--", python, "-m", "torch.distributed.run", "--nproc_per_node=2",
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
               JOB, "--hang-rank", "1", "--hang-step", "8", "--timeout-s", "25"]
    started = time.monotonic()
    proc = subprocess.Popen(command, env=clean_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    out = queue.Queue()
    threading.Thread(target=lines_of, args=(proc.stdout, out), daemon=True).start()
    seen, hang, stack = [], None, []
    rank_pids = []
    try:
        deadline = started + 45
        while time.monotonic() < deadline:
            try:
                line = out.get(timeout=0.5)
            except queue.Empty:
                if hang is not None:
                    break  # the alert's lines come in one write
                continue
            if line is None:
                break
            seen.append(line)
            if hang is None and "HANG:" in line:
                hang = line
                hang_running = proc.poll() is None
                hang_after_s = time.monotonic() - started
            elif hang is not None:
                if not line.startswith("  "):
                    break
                stack.append(line)
        log = "\n".join(seen)
        assert hang is not None, f"no HANG line in 45 s:\n{log}"
        if os.path.exists(run / "hang.json"):
            with open(run / "hang.json") as f:
                report = json.load(f)
            rank_pids = [r["pid"] for r in report["ranks"] if r["pid"]]
        else:
            report = None
    finally:
        left = stop(proc, rank_pids)

    assert hang_running, f"the HANG line came after the job ended:\n{log}"
    # The process group's timeout (25 s) would end the job; the alert comes well before.
    assert hang_after_s < 25, (hang_after_s, log)
    assert hang.startswith("saturate watch: HANG: no rank has stepped for "), hang
    assert "rank 1 " in hang and "it is hung" in hang, hang
    assert any("hang_job.py" in s and "sleep" in s for s in stack), "\n".join([hang, *stack])
    assert any(s.startswith("  rank 0: waits in ") for s in stack), "\n".join([hang, *stack])

    assert report is not None, f"no {run}/hang.json"
    assert report["suspect_rank"] == 1 and report["kind"] == "hung", report
    assert report["stalled_s"] >= 3, report
    assert any("hang_job.py" in s and "sleep" in s for s in report["stacks"]["1"]), report
    assert report["message"].splitlines()[0] in hang, (report["message"], hang)
    assert {r["rank"] for r in report["ranks"]} == {0, 1}, report

    assert len(rank_pids) == 2, report
    assert not left, f"ranks still running after saturate was stopped: {left}"
    assert time.monotonic() - started < 60

    # Afterwards, doctor's report names the rank watch saw hang, with its stack.
    r = subprocess.run([*cli(), "report", str(run), "--no-html"], env=clean_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(run / "findings.json") as f:
        findings = json.load(f)["findings"]
    (dead,) = [f for f in findings if f["cause"] == "idle_allocation"]
    assert "rank 1 hung (seen while the job ran, at hang_job.py" in dead["title"], dead["title"]
