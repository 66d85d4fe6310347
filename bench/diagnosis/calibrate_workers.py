#!/usr/bin/env python3
"""Measures what DataLoader worker processes cost beyond the loading itself,
for doctor's prediction when its fix moves inline loading (num_workers=0)
into workers (src/doctor/rules.cc, kWorkerCpuFactor and kWorkerStartCpuS;
docs/diagnosis.md "Workers where there were none").

The same loop (bench/diagnosis/train.py: JPEG photos, batch 32, a light conv
net) runs under `saturate doctor` three ways, interleaved over --rounds:

    inline       -j 0                          the training process loads
    persistent   -j 2 --persistent-workers     two workers, started once
    restarting   -j 2                          two workers, started at every pass

From each run's findings.json features it takes, per sample: the fetches'
steady CPU (loader_compute_ns_per_sample: each thread's first fetch left
out), and the rest of the process tree's CPU (tree CPU - fetch CPU: training,
plus with workers the batches handed over and the workers' starts). Then:

    worker CPU factor = (fetch + rest)_persistent - rest_inline, over fetch_inline
                        (the CPU a sample's loading costs in a worker, collation
                        into shared memory and the hand-over included, per CPU
                        of the same loading inline)
    start CPU         = (tree CPU_restarting - tree CPU_persistent) per sample
                        x samples / (passes x workers): one worker's start and
                        stop, its first fetch's excess included

    python bench/diagnosis/calibrate_workers.py [--rounds 3] [--json OUT]
    python bench/diagnosis/calibrate_workers.py --pool A.json B.json   # pooled, no runs
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as suite  # noqa: E402  (bench/diagnosis/run.py)

CONFIGS = [
    ("inline", ["-j", "0"]),
    ("persistent", ["-j", "2", "--persistent-workers"]),
    ("restarting", ["-j", "2"]),
]


def per_sample(features):
    """(fetch ns, rest ns, tree ns) per sample, and the worker starts seen."""
    rate = features["samples_per_s"]
    tree_ns = features["tree_cpu_cores"] / rate * 1e9
    fetch_all_ns = features["loader_cpu_cores"] / rate * 1e9  # every fetch, in the window
    return {"fetch_ns": features["loader_compute_ns_per_sample"],
            "rest_ns": tree_ns - fetch_all_ns, "tree_ns": tree_ns,
            "samples": rate * features["active_s"],
            "starts": features["loader_passes"] * (features.get("loader_threads") or 0),
            "samples_per_s": rate, "other_cores": features.get("other_cpu_cores")}


def measure(opts, runs):
    """Runs the three ways, interleaved over opts.rounds; appends to RUNS."""
    cli = suite.saturate_cli(opts.saturate)
    photos = suite.make_photos(os.path.dirname(opts.runs), 384)
    scenario = suite.Scenario("calibrate", "", [], [], (opts.steps, opts.steps))
    base = ["--data", photos, "-b", "32", "--steps", str(opts.steps)]
    for r in range(opts.rounds):
        for name, extra in CONFIGS:
            out = os.path.join(opts.runs, "%s-%d" % (name, r + 1))
            found = suite.doctor(cli, opts.python, out, scenario, base + extra, quiet_s=20)
            runs[name].append(per_sample(found["features"]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=96, help="steps per run (12 per pass)")
    p.add_argument("--runs", default=os.path.join(suite.REPO, "runs", "diagnosis", "calibrate"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--saturate", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--pool", nargs="+", default=None, metavar="JSON",
                   help="run nothing: pool the runs of earlier --json outputs")
    opts = p.parse_args(argv)
    runs = {name: [] for name, _ in CONFIGS}
    if opts.pool:
        for path in opts.pool:
            with open(path) as f:
                for name, rows in json.load(f)["runs"].items():
                    runs[name] += rows
    else:
        measure(opts, runs)

    def med(name, key):
        return statistics.median(x[key] for x in runs[name])

    inline_fetch = med("inline", "fetch_ns")
    factor = (med("persistent", "fetch_ns") + med("persistent", "rest_ns")
              - med("inline", "rest_ns")) / inline_fetch
    fetch_factor = med("persistent", "fetch_ns") / inline_fetch
    starts = [(x["tree_ns"] - med("persistent", "tree_ns")) * x["samples"] / x["starts"] / 1e9
              for x in runs["restarting"] if x["starts"] > 0]
    start_s = statistics.median(starts) if starts else None
    result = {"runs": runs, "worker_cpu_factor": factor, "fetch_cpu_factor": fetch_factor,
              "start_cpu_s": start_s, "start_cpu_s_each": starts}
    for name, _ in CONFIGS:
        print("%-10s fetch %s ms/sample, rest %s ms/sample, %s samples/s, other cores %s" % (
            name, " ".join("%.3f" % (x["fetch_ns"] / 1e6) for x in runs[name]),
            " ".join("%.3f" % (x["rest_ns"] / 1e6) for x in runs[name]),
            " ".join("%.0f" % x["samples_per_s"] for x in runs[name]),
            " ".join("%.2f" % (x["other_cores"] or 0) for x in runs[name])))
    print("worker CPU per sample / inline fetch CPU: %.3f (the fetch alone: %.3f)" % (
        factor, fetch_factor))
    if start_s is not None:
        print("CPU per worker start: %.1f ms (each run: %s)" % (
            1e3 * start_s, " ".join("%.1f" % (1e3 * s) for s in starts)))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
