#!/usr/bin/env python3
"""saturate doctor's accuracy suite (issue 28): real CPU training loops with
planted causes, each run unmodified under `saturate doctor`; the fix that the
top finding names is applied (a scenario flag of train.py), the loop runs
again, and the measured gain is set against doctor's predicted gain.

    python bench/diagnosis/run.py                  # the full suite (~10 min on 2 cores)
    python bench/diagnosis/run.py --quick          # fewer steps (CI)
    python bench/diagnosis/run.py --only inline_loading --json out.json

Prints a table: scenario, planted cause, top finding (and its share of the
run), right?, predicted gain, measured gain, within +-30%?; then the three goal
metrics: top finding right (goal >= 9/10), healthy loops with no finding above
5%, measured gain within +-30% of the prediction (goal >= 80% of findings).

Gains are throughput ratios (after / before, samples/s from findings.json's
features; for multi-rank runs the first rank's, which is every rank's under DDP).
"within +-30%" is doctor --check-fix's rule: the measured gain (speedup - 1)
within 30% of the predicted gain, or 3 points; a prediction that is an upper
bound is met from 70% of it up to it.

The CLI: --saturate, else $SATURATE_CLI, else `saturate` on PATH, else
`python -m saturate`. The torchrun scenario needs torch >= 2's torchrun:
$SATURATE_TORCH2_PYTHON (e.g. .venv-torch2/bin/python); skipped without it.
"""

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(HERE, "train.py")
MAKE_PHOTOS = os.path.join(REPO, "scripts", "make-photo-dataset")
sys.path.insert(0, HERE)
import gpu_scenarios  # noqa: E402  (the GPU scenarios: run.py --gpu)
from gpu_scenarios import flag, set_flag  # noqa: E402  (a train.py flag's value in argv)

TOLERANCE = 0.30
HEALTHY_MAX_PCT = 5.0
MAX_AFTER_GROWTH = 4.0  # the fixed loop's steps grow with the predicted gain, at most this
PAIR_SPREAD = 0.15  # before/after pairs whose ratios spread more than this get one more pair


class Scenario:
    """One planted cause (or none, or two). `args` are train.py's flags
    (PHOTOS stands for the photo dataset); `steps` is (full, quick); `expect`
    the causes whose top finding counts as right (empty: a healthy loop)."""

    def __init__(self, name, planted, expect, args, steps, ranks=1, straggler=None):
        self.name, self.planted, self.expect = name, planted, set(expect)
        self.args, self.steps, self.ranks, self.straggler = args, steps, ranks, straggler


PHOTOS = "{PHOTOS}"
PHOTO = ["--data", PHOTOS]
# A model with a 64 MB frozen part: each torch.save writes ~65 MB.
BIG = ["--frozen-mb", "64"]
TINY = ["-a", "mlp", "--image-size", "32", "--hidden", "2048", "--optimizer", "adam", "-b", "1",
        "-j", "0", "-p", "50"]

SCENARIOS = [
    Scenario("inline_loading", "inline loading (-j 0)", ["input_pipeline"],
             [*PHOTO, "-j", "0", "-b", "32"], (96, 24)),
    Scenario("few_workers", "too few workers (-j 1, 2 cores)", ["input_pipeline"],
             [*PHOTO, "-j", "1", "-b", "32"], (80, 30)),
    Scenario("slow_disk", "slow disk (4 MB/s throttle)", ["io_bound"],
             [*PHOTO, "-j", "2", "-b", "16", "--read-mbps", "4"], (50, 20)),
    Scenario("tiny_batch", "tiny batch, fixed optimizer cost", ["parallelism"],
             TINY, (120, 40)),
    Scenario("checkpoint", "torch.save every 4 steps (65 MB)", ["checkpoint_stall"],
             ["--data", "synthetic", *BIG, "-j", "0", "-b", "32", "--save-every", "4"], (120, 40)),
    Scenario("healthy", "none (compute-bound conv net)", [],
             ["--data", "synthetic", "--width", "32", "--threads", "2", "-j", "0", "-b", "64"],
             (100, 24)),
    Scenario("straggler", "straggler rank 1 (slow disk, torchrun x2)", ["input_pipeline", "io_bound"],
             [*PHOTO, "-j", "0", "-b", "8", "--threads", "1", "--slow-rank", "1", "--read-mbps", "2"],
             (60, 20), ranks=2, straggler=1),
    Scenario("inline+checkpoint", "inline loading + checkpoints", ["input_pipeline",
                                                                   "checkpoint_stall"],
             [*PHOTO, *BIG, "-j", "0", "-b", "32", "--save-every", "4"], (96, 24)),
    # Every 8 steps at batch 1: at batch 8 (the fix) a save every step, as
    # often in samples (every 10 became every 1, 25% more saves per sample).
    Scenario("tiny+checkpoint", "tiny batch + checkpoints", ["parallelism", "checkpoint_stall"],
             [*TINY, "--save-every", "8"], (120, 40)),
    Scenario("slow_disk+checkpoint", "slow disk + checkpoints", ["io_bound", "checkpoint_stall"],
             [*PHOTO, *BIG, "-j", "2", "-b", "16", "--read-mbps", "4", "--save-every", "4"],
             (50, 20)),
]
CPU_SCENARIOS = [s.name for s in SCENARIOS if s.ranks == 1]


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def saturate_cli(explicit=None):
    if explicit:
        return explicit.split()
    if os.environ.get("SATURATE_CLI"):
        return [os.environ["SATURATE_CLI"]]
    found = shutil.which("saturate")
    return [found] if found else [sys.executable, "-m", "saturate"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_flag(args, name, has_value=True):
    args = list(args)
    if name in args:
        i = args.index(name)
        del args[i:i + (2 if has_value else 1)]
    return args


def make_photos(workdir, count):
    """An ImageFolder of COUNT real photos (scripts/make-photo-dataset), made once."""
    root = os.path.join(workdir, "photos-%d" % count)
    if not os.path.isdir(os.path.join(root, "train")):
        log("making %d photos in %s" % (count, root))
        subprocess.run([sys.executable, MAKE_PHOTOS, "--train", str(count), "--val", "0",
                        root + ".tmp"], check=True, capture_output=True, timeout=600)
        os.rename(root + ".tmp", root)
    return root


def busy_cores(seconds=0.5):
    """Cores busy on this machine over SECONDS (/proc/stat), or None."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0)  # total, idle + iowait
    try:
        t0, i0 = read()
        time.sleep(seconds)
        t1, i1 = read()
    except OSError:
        return None
    return (os.cpu_count() or 1) * (1 - (i1 - i0) / max(1, t1 - t0))


def wait_for_quiet(limit_s, max_cores=0.5):
    """Waits up to LIMIT_S for other work on the machine to drop below
    MAX_CORES (compiles beside the suite make loops look CPU-contended);
    returns the busy cores seen last."""
    deadline = time.monotonic() + limit_s
    while True:
        busy = busy_cores()
        if busy is None or busy < max_cores or time.monotonic() >= deadline:
            return busy
        time.sleep(2)


def doctor(cli, python, run_dir, scenario, args, torchrun=None, timeout=600, quiet_s=0):
    """Runs train.py ARGS (a GPU scenario: train_gpu.py, with GPU sampling) under
    `saturate doctor`; returns findings.json."""
    if quiet_s > 0:
        busy = wait_for_quiet(quiet_s)
        if busy is not None and busy >= 0.5:
            log("  the machine is busy (%.1f cores) after %.0f s: running anyway" % (busy, quiet_s))
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    if scenario.ranks > 1:
        command = [*torchrun, "--nproc_per_node=%d" % scenario.ranks, "--master_addr",
                   "127.0.0.1", "--master_port", str(free_port()), TRAIN, *args]
    else:
        command = [python, getattr(scenario, "script", TRAIN), *args]
    gpu = getattr(scenario, "gpu", False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SATURATE_RUN")}
    t0 = time.monotonic()
    for attempt in range(4):
        try:
            r = subprocess.run([*cli, "doctor", *([] if gpu else ["--no-gpu"]), "--no-html",
                                "--out", run_dir, "--", *command], env=env, capture_output=True,
                               text=True, timeout=timeout)
            break
        except OSError as e:  # the CLI is being relinked by a build beside the suite
            if attempt == 3:
                raise RuntimeError("cannot run %s: %s" % (cli[0], e))
            log("  %s; retrying in 15 s" % e)
            time.sleep(15)
    log("  %s: %.1f s, exit %d" % (os.path.relpath(run_dir), time.monotonic() - t0, r.returncode))
    if r.returncode != 0:
        raise RuntimeError("doctor failed (exit %d): %s\n%s\n%s" % (
            r.returncode, " ".join(command), r.stdout[-3000:], r.stderr[-3000:]))
    with open(os.path.join(run_dir, "findings.json")) as f:
        return json.load(f)


def ranked(findings):
    """Findings with a measured loss, largest first (info findings are not ranked)."""
    return [f for f in findings.get("findings", []) if not f.get("info")]


def evidence(finding, key):
    for e in finding.get("evidence") or []:
        if e.get("key") == key:
            return e.get("value")
    return None


def throughput(findings, batch, world):
    """Samples/s of the training window (all ranks)."""
    feats = findings.get("features", {})
    rate = feats.get("samples_per_s")
    if not rate:
        steps, active = feats.get("steps") or 0, feats.get("active_s") or 0
        rate = batch * steps / active if steps and active else None
    return rate * world if rate else None


def apply_fix(scenario, args, finding, findings):
    """train.py's flags after the fix the finding names; (args, description) or
    (None, reason) when the suite has no flag for it."""
    if getattr(scenario, "gpu", False):  # pinned memory, syncs, AMP, batch: gpu_scenarios.py
        gpu_fix = gpu_scenarios.apply_fix(args, finding)
        if gpu_fix is not None:
            return gpu_fix
    fix = finding.get("fix_value") or {}
    cause = finding["cause"]
    if scenario.straggler is not None and evidence(finding, "straggler_rank") is not None:
        args = drop_flag(drop_flag(args, "--slow-rank"), "--read-mbps")
        return args, "slow rank's disk fixed"
    if cause == "cpu_contention":  # the fix is to stop the other work: not the script's
        return None, "n/a (other work)"
    if cause == "io_bound":
        return args + ["--cache"], "--cache"
    if "num_workers" in fix or "threads" in fix:
        n = int(fix.get("num_workers", fix.get("threads")))
        return set_flag(args, "-j", n), "-j %d" % n
    if "persistent_workers" in fix:
        return args + ["--persistent-workers"], "--persistent-workers"
    if "prefetch" in fix or "prefetch_factor" in fix:
        n = int(fix.get("prefetch_factor", fix.get("prefetch")))
        return set_flag(args, "--prefetch-factor", n), "--prefetch-factor %d" % n
    if "batch_size" in fix or "batch_size_factor" in fix:
        old = int(flag(args, "-b", 32))
        new = int(fix["batch_size"]) if "batch_size" in fix else old * int(fix["batch_size_factor"])
        args = set_flag(args, "-b", new)
        # Keep the run about as long: the same samples in fewer steps.
        steps = int(flag(args, "--steps"))
        args = set_flag(args, "--steps", max(10, math.ceil(steps * old / new)))
        every = flag(args, "--save-every")
        if every:  # checkpoints as often in samples
            args = set_flag(args, "--save-every", max(1, round(int(every) * old / new)))
        return args, "-b %d" % new
    if "checkpoint_interval_s" in fix:
        step_s = findings["features"].get("step_time_mean_s") or 0
        every = max(1, round(fix["checkpoint_interval_s"] / step_s)) if step_s else 10 ** 9
        return set_flag(args, "--save-every", every), "--save-every %d" % every
    if not fix:
        return None, "n/a (no number in the fix)"
    return None, "no flag for %s %s" % (cause, json.dumps(fix))


def within_tolerance(predicted, measured, upper_bound=False, tolerance=TOLERANCE):
    """doctor --check-fix's rule (src/doctor/check_fix.cc JudgeCheck): the measured
    gain (speedup - 1) within 30% of the predicted gain, or within 3 points; an
    upper bound is met from 70% of it (less 3 points) up to it (plus the slack)."""
    want, got = predicted - 1, measured - 1
    slack = max(tolerance * abs(want), 0.03)
    if measured <= 0:
        return False
    if upper_bound:
        return (1 - tolerance) * want - 0.03 <= got <= want + slack
    return abs(got - want) <= slack


def time_left(opts):
    """Seconds left of --budget (infinite without one)."""
    deadline = getattr(opts, "deadline", None)
    return math.inf if deadline is None else deadline - time.monotonic()


def run_needs(s, opts):
    """Seconds one run of S takes at least: its time limit and a start-up."""
    seconds = getattr(s, "seconds", None)
    return (seconds[1] if opts.quick else seconds[0]) + 8 if seconds else 30


def run_timeout(opts):
    """One doctor run's timeout: 10 minutes, or what is left of --budget."""
    return max(20, min(600, time_left(opts)))


def run_scenario(s, opts, cli, photos):
    steps = s.steps[1] if opts.quick else s.steps[0]
    args = [photos if a == PHOTOS else a for a in s.args] + ["--steps", str(steps)]
    if getattr(s, "seconds", None):  # GPU scenarios: a time limit, whatever a step takes
        args += ["--seconds", str(s.seconds[1] if opts.quick else s.seconds[0])]
    gpu = getattr(s, "gpu", False)
    row = {"scenario": s.name, "planted": s.planted, "expect": sorted(s.expect), "args": args}
    torchrun = None
    if s.ranks > 1:
        py2 = opts.torch2_python
        if not py2:
            row["skipped"] = "set SATURATE_TORCH2_PYTHON (a torch >= 2 env with torchrun)"
            return row
        exe = os.path.join(os.path.dirname(py2), "torchrun")
        torchrun = [exe] if os.access(exe, os.X_OK) else [py2, "-m", "torch.distributed.run"]
    log("%s: %s" % (s.name, " ".join(args)))
    out = os.path.join(opts.runs, s.name)
    before = doctor(cli, opts.python, os.path.join(out, "before"), s, args, torchrun,
                    timeout=run_timeout(opts), quiet_s=opts.quiet_wait)
    row["before_other_cores"] = before.get("features", {}).get("other_cpu_cores")
    if gpu:
        row["before_gpu"] = gpu_scenarios.gpu_features(before)
    found = ranked(before)
    top = found[0] if found else None
    batch = int(flag(args, "-b", 32))
    row["before_samples_per_s"] = throughput(before, batch, s.ranks)
    row["max_pct"] = max([f["time_lost_pct"] for f in found], default=0.0)
    row["findings"] = [{"cause": f["cause"], "time_lost_pct": f["time_lost_pct"],
                        "fix_value": f.get("fix_value"), "prediction": f.get("prediction"),
                        "title": f.get("title")} for f in found]
    if top is None or (not s.expect and top["time_lost_pct"] <= HEALTHY_MAX_PCT):
        row["top"] = None if top is None else top["cause"]
        row["top_pct"] = None if top is None else top["time_lost_pct"]
        row["right"] = not s.expect
        return row
    row["top"], row["top_pct"] = top["cause"], top["time_lost_pct"]
    row["right"] = top["cause"] in s.expect and (
        s.straggler is None or evidence(top, "straggler_rank") == s.straggler)
    row["fix_value"] = top.get("fix_value")
    pred = top.get("prediction") or {}
    row["predicted"] = pred.get("speedup")
    row["prediction"] = pred or None
    if opts.no_fix:
        return row
    fixed_args, how = apply_fix(s, args, top, before)
    row["fix_applied"] = how
    if fixed_args is None:
        return row
    # The fixed loop runs about as long as the loop before it (a fix that
    # triples the rate would otherwise measure it over a third of the time):
    # its steps grow with the predicted gain, at most x4. Rates are per
    # second of the training window, so the length only sets the noise.
    if row["predicted"] and flag(fixed_args, "--steps"):
        grow = min(MAX_AFTER_GROWTH, max(1.0, row["predicted"]))
        fixed_args = set_flag(fixed_args, "--steps", math.ceil(int(flag(fixed_args, "--steps"))
                                                               * grow))
    row["fixed_args"] = fixed_args
    if time_left(opts) < run_needs(s, opts):
        row["fix_applied"] = how + " (not run: --budget spent)"
        return row
    try:
        after = doctor(cli, opts.python, os.path.join(out, "after"), s, fixed_args, torchrun,
                       timeout=run_timeout(opts), quiet_s=opts.quiet_wait)
    except (RuntimeError, subprocess.TimeoutExpired) as e:  # keep what the run before showed
        log("%s: the re-run with the fix failed: %s" % (s.name, e))
        row["fix_applied"] = how + " (re-run failed)"
        row["after_error"] = str(e).splitlines()[0]
        return row
    row["after_other_cores"] = after.get("features", {}).get("other_cpu_cores")
    if gpu:
        row["after_gpu"] = gpu_scenarios.gpu_features(after)
    row["after_top"] = (ranked(after) or [{"cause": None}])[0]["cause"]
    rates = {"before": [row["before_samples_per_s"]],
             "after": [throughput(after, int(flag(fixed_args, "-b", 32)), s.ranks)]}
    # --repeat: more before/after pairs, interleaved, so that each pair sees
    # the machine in about the same state.
    # Pairs that disagree by more than PAIR_SPREAD get one more (--extra-pairs),
    # so that the median has a majority: a run on a slow moment of the host
    # (the same loop's CPU per sample 1.55x for one run, nothing else on the
    # machine) otherwise decides half of a 2-pair mean.
    i = 1
    while i < opts.repeat or (i < opts.repeat + getattr(opts, "extra_pairs", 0)
                              and pairs_disagree(rates)):
        i += 1
        for key, run_args in (("before", args), ("after", fixed_args)):
            again = doctor(cli, opts.python, os.path.join(out, "%s-%d" % (key, i)), s, run_args,
                           torchrun, quiet_s=opts.quiet_wait)
            rates[key].append(throughput(again, int(flag(run_args, "-b", 32)), s.ranks))
    measure_gain(row, rates)
    if row.get("measured") and row["predicted"]:
        row["within"] = within_tolerance(row["predicted"], row["measured"],
                                         bool(pred.get("upper_bound")))
    return row


def pairs_disagree(rates):
    """Whether the pairs' after / before ratios spread by more than PAIR_SPREAD."""
    ratios = [a / b for b, a in zip(rates["before"], rates["after"]) if a and b]
    return len(ratios) >= 2 and max(ratios) > (1 + PAIR_SPREAD) * min(ratios)


def measure_gain(row, rates):
    """The measured gain: the median over the interleaved pairs of after / before.
    The machine's state drifts between minutes (the same loop ran 267-363
    samples/s in one session), and a pair's two runs share it, so each pair's
    ratio is the measurement and the median drops a disturbed pair. The best
    pair and the spread go in the row too."""
    row["before_rates"], row["after_rates"] = rates["before"], rates["after"]
    ratios = [a / b for b, a in zip(rates["before"], rates["after"]) if a and b]
    clean = lambda v: [x for x in v if x]  # noqa: E731
    row["before_samples_per_s"] = statistics.median(clean(rates["before"]) or [0]) or None
    row["after_samples_per_s"] = statistics.median(clean(rates["after"]) or [0]) or None
    if not ratios:
        return
    row["pair_ratios"] = ratios
    row["measured"] = statistics.median(ratios)
    row["measured_range"] = [min(ratios), max(ratios)]
    if clean(rates["before"]) and clean(rates["after"]):  # the former statistic: best of each
        row["measured_best_rates"] = max(clean(rates["after"])) / max(clean(rates["before"]))


def others(row):
    """Cores other processes used during the before / after runs (contention)."""
    vals = [row.get(k) for k in ("before_other_cores", "after_other_cores")]
    return " / ".join("%.1f" % v for v in vals if v is not None) or "-"


def fmt_gain(x):
    return "-" if x is None else "%.2fx" % x


def fmt_range(r):
    """" (1.38-1.47)": the pairs' spread, when there were several."""
    return "" if not r or r[0] == r[1] else " (%.2f–%.2f)" % tuple(r)


def table(rows):
    head = ["scenario", "planted cause", "top finding", "right", "fix applied", "predicted",
            "measured", "within ±30%", "other cores"]
    lines = []
    for r in rows:
        if r.get("skipped"):
            lines.append([r["scenario"], r["planted"], "skipped: " + r["skipped"], "", "", "", "",
                          "", ""])
            continue
        top = "none" if r.get("top") is None else "%s %.0f%%" % (r["top"], r["top_pct"])
        if r.get("error"):
            top = "error: " + r["error"][:60]
        within = r.get("within")
        lines.append([r["scenario"], r["planted"], top, "yes" if r.get("right") else "NO",
                      r.get("fix_applied", "-"),
                      ("≤ " if (r.get("prediction") or {}).get("upper_bound") else "")
                      + fmt_gain(r.get("predicted")),
                      fmt_gain(r.get("measured")) + fmt_range(r.get("measured_range")),
                      "-" if within is None else ("yes" if within else "no"),
                      others(r)])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def summary(rows):
    ran = [r for r in rows if not r.get("skipped")]
    right = sum(1 for r in ran if r.get("right"))
    healthy = [r for r in ran if not r["expect"]]
    healthy_ok = sum(1 for r in healthy if r.get("max_pct", 0) <= HEALTHY_MAX_PCT)
    gains = [r for r in ran if r.get("within") is not None]
    within = sum(1 for r in gains if r["within"])
    no_pred = sum(1 for r in ran if r.get("measured") is not None and r.get("predicted") is None)
    s = {"top_right": right, "scenarios": len(ran),
         "healthy_clean": healthy_ok, "healthy": len(healthy),
         "gain_within": within, "gains_compared": len(gains), "measured_without_prediction": no_pred,
         "skipped": [r["scenario"] for r in rows if r.get("skipped")]}
    s["goals"] = {
        "top_right_ge_90pct": len(ran) > 0 and right >= 0.9 * len(ran),
        "healthy_no_finding_above_5pct": healthy_ok == len(healthy),
        "gain_within_30pct_ge_80pct": len(gains) > 0 and within >= 0.8 * len(gains),
    }
    return s


def summary_line(s):
    line = "top finding right %d/%d; healthy loops without a finding above 5%%: %d/%d; " \
           "measured gain within ±30%% of predicted: %d/%d" % (
               s["top_right"], s["scenarios"], s["healthy_clean"], s["healthy"], s["gain_within"],
               s["gains_compared"])
    if s["measured_without_prediction"]:
        line += " (%d measured without a prediction)" % s["measured_without_prediction"]
    if s["skipped"]:
        line += "; skipped: " + ", ".join(s["skipped"])
    line += ". Goals (>= 9/10, all, >= 80%%): %s" % ", ".join(
        "%s %s" % (k, "met" if v else "NOT met") for k, v in s["goals"].items())
    return line


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer steps (CI)")
    p.add_argument("--only", action="append", default=[],
                   help="run this scenario (repeatable): " + ", ".join(s.name for s in SCENARIOS))
    p.add_argument("--cpu-only", action="store_true", help="skip the torchrun scenario")
    p.add_argument("--no-fix", action="store_true",
                   help="diagnose only: do not apply the fix and re-run")
    p.add_argument("--runs", default=os.path.join(REPO, "runs", "diagnosis"),
                   help="where run directories go (RUNS/<scenario>/before, after)")
    p.add_argument("--workdir", default=None, help="where the photo dataset goes (default: RUNS)")
    p.add_argument("--photos", type=int, default=None, help="photos in the dataset (default 384, "
                   "256 with --quick)")
    p.add_argument("--python", default=sys.executable, help="interpreter for train.py")
    p.add_argument("--torch2-python", default=os.environ.get("SATURATE_TORCH2_PYTHON"),
                   help="torch >= 2 interpreter with torchrun (default $SATURATE_TORCH2_PYTHON)")
    p.add_argument("--saturate", default=None, help="the saturate CLI (default $SATURATE_CLI)")
    p.add_argument("--quiet-wait", type=float, default=None,
                   help="before each run, wait up to this many seconds for other work on the "
                   "machine to drop below 0.5 cores (default 20, 0 with --quick)")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure each gain over this many interleaved before/after pairs (the "
                   "median of their ratios)")
    p.add_argument("--extra-pairs", type=int, default=1,
                   help="with --repeat >= 2: up to this many more pairs while the pairs' ratios "
                   "spread by more than %d%%%% (default 1)" % (100 * PAIR_SPREAD))  # argparse formats it again
    p.add_argument("--json", default=None,
                   help="write the rows and the summary here (after each scenario)")
    p.add_argument("--gpu", action="store_true",
                   help="the GPU scenarios (gpu_scenarios.py: train_gpu.py on one CUDA GPU, doctor "
                   "with GPU sampling) instead of the CPU ones: " +
                   ", ".join(s.name for s in gpu_scenarios.GPU_SCENARIOS))
    p.add_argument("--smoke", action="store_true",
                   help="with --gpu: the GPU scenarios shrunk and on the CPU (--device cpu), the "
                   "driver's whole path without a GPU (bench/gpu/run.sh --dry-run)")
    p.add_argument("--list", action="store_true",
                   help="print the scenarios (planted cause, right causes, fix, command); run none")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds the whole run may take: a scenario or fix re-run that would not "
                   "fit is reported skipped")
    opts = p.parse_args(argv)

    if opts.quiet_wait is None:
        opts.quiet_wait = 0 if opts.quick else 20
    opts.gpu = opts.gpu or opts.smoke
    pool = gpu_scenarios.GPU_SCENARIOS if opts.gpu else SCENARIOS
    if opts.smoke:
        pool = gpu_scenarios.smoke(pool)
    names = {s.name for s in pool}
    for n in opts.only:
        if n not in names:
            p.error("unknown scenario %r (known%s: %s)" % (n, " with --gpu" if opts.gpu else "",
                                                          ", ".join(sorted(names))))
    chosen = [s for s in pool if (not opts.only or s.name in opts.only)
              and not (opts.cpu_only and s.ranks > 1)]
    if opts.list:
        print(scenario_list(chosen, opts))
        return 0
    opts.deadline = None if opts.budget is None else time.monotonic() + opts.budget
    if opts.gpu and not opts.smoke:
        ok, message = gpu_scenarios.cuda_check(opts.python)
        log(message)
        if not ok:
            return 2
    cli = saturate_cli(opts.saturate)
    os.makedirs(opts.runs, exist_ok=True)
    photos = None
    if any(PHOTOS in s.args for s in chosen):
        photos = make_photos(opts.workdir or opts.runs,
                             opts.photos or (256 if opts.quick else 384))
    rows = []
    t0 = time.monotonic()
    for s in chosen:
        if time_left(opts) < run_needs(s, opts):
            rows.append({"scenario": s.name, "planted": s.planted, "expect": sorted(s.expect),
                         "skipped": "no time left of --budget %.0f s" % opts.budget})
            continue
        try:
            rows.append(run_scenario(s, opts, cli, photos))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            log("%s failed: %s" % (s.name, e))
            rows.append({"scenario": s.name, "planted": s.planted, "expect": sorted(s.expect),
                         "error": str(e).splitlines()[0], "right": False})
        if opts.json:  # what ran so far, should the run be cut off
            write_json(opts.json, rows, opts)
    s = summary(rows)
    print(table(rows))
    if opts.gpu:
        print()
        print(gpu_scenarios.gpu_table(rows))
    print()
    print(summary_line(s))
    log("%.0f s" % (time.monotonic() - t0))
    if opts.json:
        write_json(opts.json, rows, opts)
    return 0


def write_json(path, rows, opts):
    doc = {"rows": rows, "summary": summary(rows), "quick": opts.quick, "gpu": opts.gpu,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "table": table(rows)}
    if opts.gpu:
        doc["gpu_table"] = gpu_scenarios.gpu_table(rows)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(path + ".tmp", path)


def scenario_list(scenarios, opts):
    """The scenarios as a table: what each plants, what counts as right, the fix, the command."""
    head = ["scenario", "planted cause", "counts as right", "fix (as the script's flag)", "command"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in scenarios:
        steps = s.steps[1] if opts.quick else s.steps[0]
        args = list(s.args) + (["--seconds", str(s.seconds[1] if opts.quick else s.seconds[0])]
                               if getattr(s, "seconds", None) else ["--steps", str(steps)])
        script = os.path.basename(getattr(s, "script", TRAIN))
        runner = "torchrun x%d " % s.ranks if s.ranks > 1 else ""
        out.append("| %s | %s | %s | %s | `%s%s %s` |" % (
            s.name, s.planted, ", ".join(sorted(s.expect)) or "no finding above 5%",
            getattr(s, "fix", "-"), runner, script, " ".join(args)))
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
