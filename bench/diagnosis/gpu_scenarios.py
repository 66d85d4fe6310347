"""The accuracy suite's GPU scenarios (issue 28, point 4): run.py --gpu.

Each scenario plants one cause in bench/diagnosis/train_gpu.py (train.py's
models and data on one CUDA GPU) with its ordinary options; run.py runs it under
`saturate doctor` WITH GPU sampling (NVML, and GPM on Hopper), applies the fix
the top finding names as a flag of the script, runs it again and compares the
measured gain with doctor's prediction, as for the CPU scenarios.

Runs are bounded in time, not steps (--seconds): a first guess at a step's
length on an unknown GPU must not decide the budget, and doctor needs the
training to outlast the start-up (imports, CUDA context: GPU idle), or the
run reads as an idle allocation.

This module holds data and pure functions only (no torch): the scenario table,
the GPU fixes' mapping to the script's flags, the row's GPU features, the
check that the interpreter sees a GPU. run.py imports it.
"""

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_GPU = os.path.join(HERE, "train_gpu.py")
STEP_CAP = 100000  # --steps: the time limit ends the runs
# Causes doctor can name (src/doctor/rules.cc): "counts as right" sets use these.
CAUSES = {"parallelism", "input_pipeline", "io_bound", "cpu_contention", "host_to_device_copy",
          "checkpoint_stall", "throttling", "communication", "memory", "idle_allocation",
          "model_config", "launch_bound", "host_sync"}


class GpuScenario:
    """A GPU scenario: the fields run.py's Scenario has, with `seconds` (full,
    --quick) of training after the first step instead of a step count, the
    script, and `fix`: the flags the planted cause's fix becomes (for the table
    in docs/diagnosis.md and the tests; the run applies what doctor says)."""

    gpu = True
    ranks = 1
    straggler = None
    script = TRAIN_GPU

    def __init__(self, name, planted, expect, args, seconds, fix):
        self.name, self.planted, self.expect = name, planted, set(expect)
        self.args, self.seconds, self.fix = args, seconds, fix
        self.steps = (STEP_CAP, STEP_CAP)


SYNTH = ["--data", "synthetic"]
# 224x224 fp32 images as a torchvision pipeline makes them: 602 KB each. One
# pass over --epoch-samples covers the run, so no pass restarts its workers.
IMAGES = [*SYNTH, "--image-size", "224", "--synthetic-size", "256", "--epoch-samples", "1000000",
          "-j", "6", "--persistent-workers"]

# In the order; a --budget that runs out leaves the last ones.
GPU_SCENARIOS = [
    # DataLoader without pin_memory: each 77 MB batch is copied from pageable
    # memory, synchronously (the copy waits for the GPU, then stages the bytes).
    GpuScenario("pageable_copy", "pageable copies (pin_memory off, 77 MB batches)",
                ["host_to_device_copy"],
                [*IMAGES, "-a", "resnet50", "-b", "128", "--amp", "bf16"], (10, 6),
                "--pin-memory"),
    # running_loss += loss.item() every step, with 15 ms of host work per step
    # that the sync keeps from overlapping the GPU's step.
    GpuScenario("host_sync", "loss.item() every step (+15 ms host work)", ["host_sync"],
                [*SYNTH, "-a", "resnet50", "--image-size", "224", "--synthetic-size", "256",
                 "-b", "128", "--data-on-gpu", "--amp", "bf16", "--sync-every", "1",
                 "--host-work-ms", "15"], (10, 6), "--sync-every 0"),
    # Eager launches of tiny kernels: the GPU waits on the CPU between them
    # (utilization < 60%: parallelism), or, if they come back to back, a busy
    # GPU with its SMs idle (GPM SM active <= 35%: launch_bound).
    GpuScenario("small_kernels", "tiny conv net, batch 8 (launch-bound)",
                ["parallelism", "launch_bound"],
                [*SYNTH, "-a", "tinynet", "--width", "8", "--image-size", "32", "-b", "8",
                 "--data-on-gpu"], (10, 6), "-b x k (doctor's factor)"),
    # fp32 matmuls with TF32 off (torch's default): the SMs compute on the FP32
    # pipes, tensor pipes idle (GPM tensor active < 5%): model_config.
    GpuScenario("amp_off", "fp32 MLP, matmul-bound (AMP off)", ["model_config"],
                [*SYNTH, "-a", "mlp", "--image-size", "64", "--hidden", "4096", "-b", "1024",
                 "--synthetic-size", "2048", "--data-on-gpu"], (10, 6), "--amp bf16"),
    # ResNet-50 in bf16 fed by 6 workers with pinned memory: nothing planted.
    GpuScenario("gpu_healthy", "none (ResNet-50 bf16, pinned, 6 workers)", [],
                [*IMAGES, "-a", "resnet50", "-b", "64", "--amp", "bf16", "--pin-memory"],
                (10, 6), "-"),
]


# --smoke: every scenario shrunk to run on the CPU in seconds.
SMOKE = {"--device": "cpu", "--image-size": "32", "-b": "4", "--hidden": "64",
         "--synthetic-size": "16", "--epoch-samples": "64", "--host-work-ms": "1", "-j": "1"}
ONLY_IF_SET = ("--hidden", "--epoch-samples", "--host-work-ms", "-j")


def shrink(args):
    """ARGS with SMOKE's sizes (a flag of ONLY_IF_SET only where ARGS has it)."""
    for name, value in SMOKE.items():
        if name in args or name not in ONLY_IF_SET:
            args = set_flag(args, name, value)
    return args


def smoke(scenarios):
    """The scenarios on the CPU (train_gpu.py --device cpu), shrunk, 2 s each:
    the driver's whole path (doctor, the fix, the re-run, the JSON) where no GPU
    is; their findings are the CPU's, not the planted causes'."""
    out = []
    for s in scenarios:
        small = GpuScenario(s.name, s.planted, s.expect, shrink(s.args), (2, 2), s.fix)
        out.append(small)
    return out


def flag(args, name, default=None):
    """The value after `name` in argv list `args` (run.py uses these too)."""
    return args[args.index(name) + 1] if name in args else default


def set_flag(args, name, value):
    """A copy of `args` with `name` set to `value` (replaced, or appended)."""
    args = list(args)
    if name in args:
        args[args.index(name) + 1] = str(value)
    else:
        args += [name, str(value)]
    return args


def apply_fix(args, finding):
    """train_gpu.py's flags after the fix a GPU finding names: (args, how),
    (None, reason) when the script has no flag for it, or None for a cause
    run.py's own mapping handles (workers, prefetch, ...). The batch fixes keep
    --steps: the runs are bounded by --seconds."""
    cause, fix = finding["cause"], finding.get("fix_value") or {}
    if cause == "host_to_device_copy":
        if "--pin-memory" in args:
            return None, "n/a (already pinned)"
        return args + ["--pin-memory"], "--pin-memory"
    if cause == "host_sync":
        if int(flag(args, "--sync-every", 0)):
            return set_flag(args, "--sync-every", 0), "--sync-every 0"
        # The sync left is the logging's loss.item(): log less often.
        every = 10 * int(flag(args, "-p", 10))
        return set_flag(args, "-p", every), "-p %d" % every
    if cause == "model_config":
        amp = flag(args, "--amp", "off")
        if amp != "off":
            return None, "n/a (already --amp %s)" % amp
        return set_flag(args, "--amp", "bf16"), "--amp bf16"
    if cause in ("parallelism", "launch_bound"):
        old = int(flag(args, "-b", 32))
        if "batch_size" in fix:
            new = int(fix["batch_size"])
        elif "batch_size_factor" in fix:
            new = old * int(fix["batch_size_factor"])
        elif cause == "launch_bound":
            new = old * 2  # its fix's "larger batch", as doctor gives with a loader's batch
        else:
            return None, "n/a (no number in the fix)"
        return set_flag(args, "-b", new), "-b %d" % new
    return None


def cuda_check(python, timeout=180):
    """(ok, message): whether PYTHON's torch sees a CUDA device, and imports
    torchvision (train.py's). Also warms the imports' files for the first run."""
    code = ("import torch, torchvision; n = torch.cuda.device_count() if torch.cuda.is_available() "
            "else 0; print(torch.__version__, n, torch.cuda.get_device_name(0) if n else '-')")
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, "run.py --gpu: cannot run %s: %s" % (python, e)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        return False, "run.py --gpu: %s cannot import torch and torchvision: %s" % (python, last)
    version, count, name = r.stdout.split(maxsplit=2)
    if int(count) == 0:
        return False, ("run.py --gpu: no CUDA device visible to %s (torch %s): the GPU scenarios "
                       "need one (bench/gpu/run.sh runs them on a lent GPU)" % (python, version))
    return True, "torch %s, %s GPU(s): %s" % (version, count, name.strip())


# Features of a GPU run worth keeping beside the verdict (findings.json's).
GPU_FEATURES = ("device_busy_pct", "gpm_samples", "gpm_util_pct", "gpm_sm_active_pct",
                "gpm_tensor_active_pct", "gpu_memory_used_max_pct", "copy_pct",
                "copy_pageable_pct", "data_wait_pct", "step_time_median_s", "steps", "active_s")


def gpu_features(findings):
    feats = findings.get("features", {})
    out = {k: feats.get(k) for k in GPU_FEATURES if feats.get(k) is not None}
    syncs = [s for s in feats.get("host_syncs") or [] if s.get("device") == "cuda"]
    if syncs:
        out["cuda_syncs_per_step"] = sum(s.get("per_step") or 0 for s in syncs)
        out["cuda_sync_s"] = sum(s.get("total_s") or 0 for s in syncs)
    return out


def gpu_table(rows):
    """What the GPU saw in each run (before -> after the fix)."""
    def cell(r, key, fmt, scale=1.0):
        vals = [(r.get(side) or {}).get(key) for side in ("before_gpu", "after_gpu")]
        return " -> ".join(fmt % (scale * v) for v in vals if v is not None) or "-"

    head = ["scenario", "GPU busy %", "SM active %", "tensor active %", "copy % of step",
            "host syncs / step", "median step ms"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("skipped") or r.get("error"):
            continue
        out.append("| " + " | ".join([
            r["scenario"], cell(r, "device_busy_pct", "%.0f"), cell(r, "gpm_sm_active_pct", "%.0f"),
            cell(r, "gpm_tensor_active_pct", "%.1f"), cell(r, "copy_pct", "%.0f"),
            cell(r, "cuda_syncs_per_step", "%.2f"),
            cell(r, "step_time_median_s", "%.1f", 1e3)]) + " |")
    return "\n".join(out)
