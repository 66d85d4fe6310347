#!/usr/bin/env python3
"""What saturate's auto-instrumentation costs an unmodified training job (issue 20).

The same synthetic training script runs plain and with the bootstrap
(python/saturate/_bootstrap first on PYTHONPATH and SATURATE_RUN_DIR set, as
`saturate watch/doctor/tune` run a job), alternated A B A B for --rounds
rounds. The script is a typical loop: a DataLoader (worker processes or
inline), an MLP forward, backward, an SGD update and one .item() per step.
Its depth is calibrated (plain) so that a step takes about 5 ms and about
100 ms on this machine. Each run times every step itself (perf_counter from
the end of one step to the end of the next, the first 20 left out) and
reports its median and mean step time; overhead is traced / plain - 1 per
round, shown as the median over rounds with the min..max spread, for the
median step, the mean step and the CPU time per step (time.process_time), and
beside it how far plain runs differ from each other (the noise floor).

On a noisy machine end-to-end differences of a fraction of a percent are
below the run-to-run spread, so a second table measures the hooks directly:
ns per call of the hooked operations (.item(), backward, optimizer.step, one
DataLoader batch, torch.save to memory, .to and .cpu on a CPU tensor), plain
vs traced, in the same alternation; the sum over what one step calls (a
batch, backward, update, .item()) is the hooks' cost per training step.

Targets (issue 20): <= 1% at 5 ms steps, <= 0.2% at 100 ms steps.

usage: bench/auto_overhead.py [--rounds 4] [--python PY] [--quick]
Exits non-zero only when a run fails, never on the numbers.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOOTSTRAP = os.path.join(REPO, "python", "saturate", "_bootstrap")
WARMUP_STEPS = 20

TRAIN = r'''
import argparse, json, time
import torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, required=True)
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--steps", type=int, required=True)
p.add_argument("--workers", type=int, default=0)
p.add_argument("--out", required=True)
args = p.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)

class Samples(Dataset):  # per-sample __getitem__ as real datasets have
    def __init__(self, n, dim):
        self.x = torch.randn(n, dim)
        self.y = torch.randint(0, 10, (n,))
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return self.x[i], self.y[i]

n = args.batch_size * (args.steps + 1)
loader = DataLoader(Samples(n, args.hidden), batch_size=args.batch_size, shuffle=True,
                    num_workers=args.workers, drop_last=True)
layers = []
for _ in range(args.layers):
    layers += [nn.Linear(args.hidden, args.hidden), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(args.hidden, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
running, times, cpu_times = 0.0, [], []
prev, prev_cpu = time.perf_counter(), time.process_time()
for x, y in loader:
    loss = loss_fn(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running += loss.item()
    now, now_cpu = time.perf_counter(), time.process_time()
    times.append(now - prev)
    cpu_times.append(now_cpu - prev_cpu)
    prev, prev_cpu = now, now_cpu
with open(args.out, "w") as f:
    json.dump({"wall": times, "cpu": cpu_times}, f)
'''

MICRO = r'''
import io, json, sys, time
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(1)
out, n = sys.argv[1], int(sys.argv[2])

def per_call(fn, calls):
    fn()
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls

t = torch.ones(1)
w = torch.ones(4, requires_grad=True)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.0)
model(torch.ones(1, 4)).sum().backward()
loader = DataLoader(TensorDataset(torch.zeros(n * 4 + 8, 1)), batch_size=1)
it = iter(loader)
state = {"w": torch.zeros(16)}
res = {
    ".item()": per_call(t.item, n * 4),
    "backward": per_call(lambda: (w * 2).sum().backward(), n),
    "optimizer.step": per_call(opt.step, n),
    "DataLoader batch": per_call(lambda: next(it), n * 4),
    "torch.save (64 B tensor, to memory)": per_call(lambda: torch.save(state, io.BytesIO()), n // 4),
    ".to(torch.float64) (CPU tensor)": per_call(lambda: t.to(torch.float64), n * 4),
    ".cpu() (CPU tensor)": per_call(t.cpu, n * 4),
}
with open(out, "w") as f:
    json.dump(res, f)
'''


PER_STEP = (".item()", "backward", "optimizer.step", "DataLoader batch")  # one each per step


def run_python(python, args, traced, run_dir, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SATURATE_") and k != "PYTHONPATH"}
    if traced:
        env["PYTHONPATH"] = BOOTSTRAP
        env["SATURATE_RUN_DIR"] = run_dir
    r = subprocess.run([python, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"auto_overhead: {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    if traced and not any(f.endswith("-auto.jsonl") for f in os.listdir(run_dir)):
        raise SystemExit(f"auto_overhead: the traced run wrote no spans file into {run_dir}")


def train_run(python, script, tmp, config, steps, traced, tag):
    out = os.path.join(tmp, f"{tag}.json")
    run_dir = os.path.join(tmp, f"{tag}-run")
    os.makedirs(run_dir, exist_ok=True)
    run_python(python, [script, "--layers", str(config["layers"]), "--steps", str(steps),
                        "--workers", str(config["workers"]), "--out", out], traced, run_dir)
    with open(out) as f:
        times = json.load(f)
    wall, cpu = times["wall"][WARMUP_STEPS:], times["cpu"][WARMUP_STEPS:]
    return statistics.median(wall), statistics.fmean(wall), statistics.fmean(cpu)


def calibrate(python, script, tmp, target_s, workers):
    """Depth for a step of about target_s: median step time at 2 and 8 layers, a line through them."""
    points = []
    for layers in (2, 8):
        med, _, _ = train_run(python, script, tmp, {"layers": layers, "workers": workers}, 80, False,
                              f"calib-{workers}-{layers}")
        points.append((layers, med))
    (l0, t0), (l1, t1) = points
    per_layer = max((t1 - t0) / (l1 - l0), 1e-6)
    return max(1, round(l0 + (target_s - t0) / per_layer))


def pct(traced, plain):
    return 100.0 * (traced / plain - 1.0)


def spread(values):
    return f"{statistics.median(values):+.2f}% ({min(values):+.2f}..{max(values):+.2f})"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4, help="A B rounds per configuration (>= 3)")
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch")
    p.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    args = p.parse_args()

    tmp = tempfile.mkdtemp(prefix="auto_overhead-")
    script = os.path.join(tmp, "train.py")
    micro = os.path.join(tmp, "micro.py")
    with open(script, "w") as f:
        f.write(TRAIN)
    with open(micro, "w") as f:
        f.write(MICRO)
    torch_version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    print(f"# {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()} "
          f"({args.python}), torch {torch_version}, load average {os.getloadavg()[0]:.2f} at start, "
          f"{time.strftime('%a %b %d %H:%M UTC %Y', time.gmtime())}")

    scale = 0.4 if args.quick else 1.0
    configs = [  # (label, target step, DataLoader workers, steps per run)
        ("5 ms, DataLoader 2 workers", 0.005, 2, int(800 * scale)),
        ("5 ms, DataLoader inline", 0.005, 0, int(800 * scale)),
        ("100 ms, DataLoader 2 workers", 0.100, 2, int(60 * scale) + WARMUP_STEPS // 2),
    ]
    rows = []
    for label, target, workers, steps in configs:
        layers = calibrate(args.python, script, tmp, target, workers)
        config = {"layers": layers, "workers": workers}
        runs = {False: [], True: []}  # (median wall, mean wall, mean CPU) per run
        for r in range(args.rounds):
            for traced in (False, True):
                runs[traced].append(train_run(args.python, script, tmp, config, steps, traced,
                                              f"{label[:6].strip()}-{workers}-{r}-{int(traced)}"))
        rows.append((label, layers, steps, runs[False], runs[True]))
        print(f"  done: {label} ({layers} layers)", file=sys.stderr, flush=True)

    print()
    print("Overhead = traced / plain - 1 per A B round: median over rounds (min..max). Noise: how far")
    print("the plain runs' median step times lie from their median (min..max), i.e. A vs A.")
    print()
    print("| step | layers | steps/run | plain median step | traced median step | overhead, median step "
          "| overhead, mean step | overhead, CPU per step | noise (plain vs plain) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, layers, steps, plain, traced in rows:
        over = [[pct(t[i], p[i]) for t, p in zip(traced, plain)] for i in range(3)]
        pm = statistics.median(p[0] for p in plain)
        noise = [pct(p[0], pm) for p in plain]
        print(f"| {label} | {layers} | {steps} | {pm * 1e3:.3f} ms "
              f"| {statistics.median(t[0] for t in traced) * 1e3:.3f} ms | {spread(over[0])} "
              f"| {spread(over[1])} | {spread(over[2])} "
              f"| {min(noise):+.2f}..{max(noise):+.2f}% |")

    # The hooks themselves, per call.
    n = 5000 if args.quick else 20000
    plain, traced = {}, {}
    for r in range(max(3, args.rounds)):
        for is_traced in (False, True):
            out = os.path.join(tmp, f"micro-{r}-{int(is_traced)}.json")
            run_dir = os.path.join(tmp, f"micro-{r}-run")
            os.makedirs(run_dir, exist_ok=True)
            run_python(args.python, [micro, out, str(n)], is_traced, run_dir)
            with open(out) as f:
                for k, v in json.load(f).items():
                    (traced if is_traced else plain).setdefault(k, []).append(v)
    print()
    print("| hooked call | plain ns/call | traced ns/call | added µs/call |")
    print("|---|---:|---:|---:|")
    per_step = 0.0
    for k in plain:
        pm, tm = statistics.median(plain[k]), statistics.median(traced[k])
        added = [t - q for t, q in zip(traced[k], plain[k])]
        if k in PER_STEP:
            per_step += statistics.median(added)
        print(f"| {k} | {pm:.0f} | {tm:.0f} | {statistics.median(added) / 1e3:.2f} "
              f"({min(added) / 1e3:.2f}..{max(added) / 1e3:.2f}) |")
    print()
    print(f"hooks per training step (one batch, backward, update, .item()): {per_step / 1e3:.1f} µs "
          f"= {100 * per_step / 5e6:.3f}% of a 5 ms step, {100 * per_step / 1e8:.4f}% of a 100 ms step "
          f"(targets: 1%, 0.2%)")


if __name__ == "__main__":
    main()
