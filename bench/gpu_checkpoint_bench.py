#!/usr/bin/env python3
"""Checkpoints while a model trains on one GPU: saturate.Checkpointer vs torch.save vs
torch.distributed.checkpoint.async_save, side by side (issue 25, point 4).

The bars (DESIGN.md, docs/checkpoint.md): a save blocks training <= 1.2x the pinned
device->host copy time of the state, and costs <= 2% of the step throughput while the
background write runs; for a ResNet-50 and for a model with >= 1 GiB of state.

Two workloads, each trained on synthetic GPU-resident data with bf16 autocast:
  resnet50  torchvision ResNet-50, channels_last, SGD with momentum, batch 256 at 224 px
            (state: weights, BN buffers, momentum: ~205 MB)
  gpt       a GPT-style decoder (token embedding, nn.TransformerEncoderLayer blocks with a
            causal mask, LM head) sized to --big-params parameters, AdamW
            (state: weights + exp_avg + exp_avg_sq = 12 bytes per parameter; default
            ~105M parameters, 1.17 GiB)

Per workload, in this order:
  baseline   per-step time with no saves
  d2h        the reference of the "blocked" bar: every tensor of the state (model.state_dict()
             and the optimizer's state) copied into preallocated pinned host tensors of the same
             layout, non_blocking, one synchronize (median of 5); beside it the bulk ceiling:
             one copy of the same byte count from one device buffer
  methods    saturate     Checkpointer(dir, keep=1), prepare(state) before the loop (timed
                          apart); save() returns after the snapshot; the C++ writer fsyncs
                          and commits
             dcp          dcp.async_save(state, checkpoint_id=dir/step-N, no_dist=True): the
                          call stages the state in host memory (torch's default stager), a
                          thread writes the files; the previous save's future is waited on
                          before the next save (that wait counts as blocked)
             torch.save   torch.save(state, file): training waits for the whole write (no
                          fsync: what a user's loop does)
           The state saved is {"model": model.state_dict(), "optim": opt.state_dict(),
           "step": step}, built inside the timed call. Each method saves --saves times (fewer
           when its share of --budget runs out); after a save the loop trains until the
           background write committed and then --quiet-steps more steps (--every 0, the
           default: save as often as the writer allows), or exactly --every steps.
  Per save:  blocked = torch.cuda.synchronize(); t0; save call; t1 -- plus any wait before
             the next save (dcp's previous future, saturate's on_busy="wait" is inside the
             call); write_s = the background write (saturate's engine counter; dcp: the
             future's completion); each step's time, flagged "during write" when the write was
             still running as the step was launched.
  Step time: a CUDA event after every step (the GPU timeline, bubbles included: a host that
             launches late shows), the host kept at most one step ahead of the GPU (it waits
             on the previous step's event), no synchronize per step. CPU: perf_counter.
  Host CPU:  busy / iowait / steal shares of all cores (/proc/stat) over the baseline and over
             each save's steps: a VM's I/O can cost the training thread CPU time (steal).
  Disk:      dd bs=16M conv=fsync of --disk-probe-mib into --dir first: the disk's own speed.
  Derived:   blocked / d2h (bar <= 1.2), loss while writing = mean step time during the
             write / baseline mean - 1 (bar <= 2%), the same against the quiet steps of the
             same method (a drift check), bytes written, and one load of the last checkpoint
             compared with a host copy of 5 tensors taken just before that save.

Usage (GPU; saturate built with CUDA into build/gpu by bench/gpu/run.sh, whose unpacked
libraries sit in /tmp/satdeps/rt; ~65 s at the defaults on an H100):
  PYTHONPATH=build/gpu/python LD_LIBRARY_PATH=/tmp/satdeps/rt \
      python3 bench/gpu_checkpoint_bench.py --budget 100 --json ckpt.json
  PYTHONPATH=build/ci/python .venv-torch2/bin/python bench/gpu_checkpoint_bench.py --smoke
      (tiny models on the CPU, < 60 s: a code-path check, no numbers to keep)
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import inspect
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402

from checkpoint_bench import dd_mb_per_s  # noqa: E402
from gpu_train_bench import log, machine_info, sync, write_json  # noqa: E402

import saturate  # noqa: E402  (needed: this bench measures it)

try:
    import torch.distributed.checkpoint as dcp
    if not hasattr(dcp, "async_save"):  # torch < 2.3: the dcp method is reported skipped
        dcp = None
except ImportError:
    dcp = None

# DCP warns once per call that no process group exists: that is the single-process intent.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")

METHODS = ("saturate", "dcp", "torch.save")
MODELS = ("resnet50", "gpt")
Result = dict[str, Any]


# ------------------------------------------------------------------------------ workloads


class Workload:
    """A model, its optimizer, one synthetic batch on the device and the training step."""

    def __init__(self, name: str, model: nn.Module, opt: torch.optim.Optimizer,
                 loss_fn: Callable[[], torch.Tensor], dev: torch.device, info: Result):
        self.name, self.model, self.opt, self.loss_fn, self.dev = name, model, opt, loss_fn, dev
        self.cuda = dev.type == "cuda"
        self.info = info

    def step(self) -> None:
        amp = torch.autocast(device_type=self.dev.type, dtype=torch.bfloat16, enabled=self.cuda)
        with amp:
            loss = self.loss_fn()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def state(self, step: int) -> Result:
        """What a training loop saves (built inside every timed save)."""
        return {"model": self.model.state_dict(), "optim": self.opt.state_dict(), "step": step}


def build_resnet(args: argparse.Namespace, dev: torch.device) -> Workload:
    torch.manual_seed(args.seed)
    model = getattr(torchvision.models, args.cnn_arch)(num_classes=args.cnn_classes)
    fmt = torch.channels_last if dev.type == "cuda" else torch.preserve_format
    model.to(dev, memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(args.cnn_batch, 3, args.cnn_size, args.cnn_size, device=dev)
    x = x.to(memory_format=fmt)
    y = torch.randint(0, args.cnn_classes, (args.cnn_batch,), device=dev)
    info = {"arch": args.cnn_arch, "batch": args.cnn_batch, "size": args.cnn_size,
            "optimizer": "SGD(momentum=0.9)", "channels_last": dev.type == "cuda"}
    return Workload("resnet50", model, opt, lambda: F.cross_entropy(model(x), y), dev, info)


class GPT(nn.Module):
    """Token embedding + pre-norm TransformerEncoderLayer blocks (causal) + LM head."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1),
                             persistent=False)
        forward = inspect.signature(nn.TransformerEncoderLayer.forward).parameters
        self.causal = {"is_causal": True} if "is_causal" in forward else {}  # torch >= 2.0

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos
        for block in self.blocks:
            x = block(x, src_mask=self.mask, **self.causal)
        return self.head(self.ln(x))


def gpt_layers(params: float, vocab: int, d: int, seq: int) -> int:
    """Blocks so that the model holds about `params` parameters (at least one)."""
    per_block = 12 * d * d + 13 * d
    fixed = 2 * vocab * d + seq * d + 2 * d
    return max(1, round((params - fixed) / per_block))


def build_gpt(args: argparse.Namespace, dev: torch.device) -> Workload:
    torch.manual_seed(args.seed)
    layers = gpt_layers(args.big_params, args.gpt_vocab, args.gpt_dim, args.gpt_seq)
    model = GPT(args.gpt_vocab, args.gpt_dim, layers, args.gpt_heads, args.gpt_seq).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    idx = torch.randint(0, args.gpt_vocab, (args.gpt_batch, args.gpt_seq), device=dev)
    tgt = torch.randint(0, args.gpt_vocab, (args.gpt_batch, args.gpt_seq), device=dev)

    def loss_fn() -> torch.Tensor:
        return F.cross_entropy(model(idx).flatten(0, 1), tgt.flatten())

    n = sum(p.numel() for p in model.parameters())
    info = {"params": n, "layers": layers, "dim": args.gpt_dim, "heads": args.gpt_heads,
            "vocab": args.gpt_vocab, "seq": args.gpt_seq, "batch": args.gpt_batch,
            "optimizer": "AdamW"}
    return Workload("gpt", model, opt, loss_fn, dev, info)


BUILDERS = {"resnet50": build_resnet, "gpt": build_gpt}


# ---------------------------------------------------------------------------------- state


def state_tensors(w: Workload) -> list[torch.Tensor]:
    """Every tensor a save writes: model.state_dict() and the optimizer's state (once each)."""
    out, seen = [], set()

    def add(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            if id(obj) not in seen:
                seen.add(id(obj))
                out.append(obj.detach())
        elif isinstance(obj, dict):
            for v in obj.values():
                add(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                add(v)

    add(w.state(0))
    return out


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def d2h_reference(w: Workload, reps: int) -> Result:
    """The pinned device->host copy of the whole state, per tensor and as one bulk copy."""
    tensors = state_tensors(w)
    total = sum(nbytes(t) for t in tensors)
    pin = w.cuda
    dst = [torch.empty_like(t, device="cpu", pin_memory=pin) for t in tensors]  # same strides
    per_tensor = []
    for _ in range(reps):
        sync(w.dev)
        t0 = time.perf_counter()
        for d, s in zip(dst, tensors):
            d.copy_(s, non_blocking=pin)
        sync(w.dev)
        per_tensor.append(time.perf_counter() - t0)
    del dst
    flat_src = torch.empty(total, dtype=torch.uint8, device=w.dev)
    flat_dst = torch.empty(total, dtype=torch.uint8, pin_memory=pin)
    bulk = []
    for _ in range(reps):
        sync(w.dev)
        t0 = time.perf_counter()
        flat_dst.copy_(flat_src, non_blocking=pin)
        sync(w.dev)
        bulk.append(time.perf_counter() - t0)
    del flat_src, flat_dst
    med = statistics.median
    return {"tensors": len(tensors), "bytes": total, "pinned": pin,
            "per_tensor_s": med(per_tensor), "bulk_s": med(bulk),
            "per_tensor_gb_s": total / med(per_tensor) / 1e9, "bulk_gb_s": total / med(bulk) / 1e9}


def reference_tensors(w: Workload) -> dict[str, torch.Tensor]:
    """Host copies of 5 tensors of the state (first, middle, last weight; two optimizer
    tensors), keyed by their path in the state, to check a loaded checkpoint against."""
    sd = w.model.state_dict()
    keys = list(sd)
    refs = {f"model/{k}": sd[k] for k in (keys[0], keys[len(keys) // 2], keys[-1])}
    ost = w.opt.state_dict()["state"]
    idxs = sorted(ost)
    for i in (idxs[0], idxs[-1]) if idxs else ():
        name, t = next((k, v) for k, v in ost[i].items()
                       if isinstance(v, torch.Tensor) and v.dim() > 0)
        refs[f"optim/state/{i}/{name}"] = t
    return {k: v.detach().to("cpu", copy=True) for k, v in refs.items()}


def lookup(state: Any, path: str) -> Any:
    for part in path.split("/"):
        key = int(part) if isinstance(state, dict) and part.isdigit() and int(part) in state \
            else part
        state = state[key]
    return state


def compare(refs: dict[str, torch.Tensor], get: Callable[[str], torch.Tensor]) -> Result:
    """Each reference tensor against the loaded one; a mismatch says how much differs (a
    part of a tensor that differs points at a copy that raced the next step)."""
    bad, details = [], {}
    for k, ref in refs.items():
        got = get(k).detach().to("cpu")
        if got.shape != ref.shape or got.dtype != ref.dtype:
            bad.append(k)
            details[k] = {"shape": list(got.shape), "dtype": str(got.dtype)}
        elif not torch.equal(got, ref):
            bad.append(k)
            diff = got.ne(ref)
            details[k] = {"frac_elements_differ": diff.float().mean().item(),
                          "first_differing_element": int(diff.flatten().nonzero()[0].item()),
                          "max_abs_diff": (got.float() - ref.float()).abs().max().item()}
    return {"ok": not bad, "compared": len(refs), "mismatches": bad, "details": details}


def dir_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# ------------------------------------------------------------------------------ step clock


class StepClock:
    """Per-step times without a synchronize per step. CUDA: an event after each step; a step's
    time is the GPU-timeline gap between consecutive events (so a late launch by the host
    counts), and the host waits on the previous step's event, staying at most one step ahead.
    CPU: perf_counter between marks."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.marks: list[Any] = []

    def _mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def start(self) -> None:
        self.marks = [self._mark()]

    def mark(self) -> None:
        self.marks.append(self._mark())
        if self.cuda and len(self.marks) >= 2:
            self.marks[-2].synchronize()

    def durations(self) -> list[float]:
        if not self.cuda:
            return [b - a for a, b in zip(self.marks, self.marks[1:])]
        self.marks[-1].synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]


def cpu_fields() -> list[int]:
    """The host's aggregate CPU jiffies from /proc/stat (user nice system idle iowait irq
    softirq steal), or [] where there is none."""
    try:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:9]]
    except OSError:
        return []


def cpu_share(before: list[int], after: list[int]) -> Optional[Result]:
    """Busy (user..softirq), iowait and steal as % of all cores' time between two reads."""
    if not before or not after:
        return None
    d = [b - a for a, b in zip(before, after)]
    total = sum(d) or 1
    return {"busy_pct": 100 * (d[0] + d[1] + d[2] + d[5] + d[6]) / total,
            "iowait_pct": 100 * d[4] / total, "steal_pct": 100 * d[7] / total}


def run_steps(w: Workload, n: int) -> list[float]:
    """n steps from a synchronized start; their times."""
    sync(w.dev)
    clock = StepClock(w.cuda)
    clock.start()
    for _ in range(n):
        w.step()
        clock.mark()
    return clock.durations()


# -------------------------------------------------------------------------------- methods


class SaturateMethod:
    """saturate.Checkpointer: snapshot in save(), fsynced write + commit on a C++ thread."""

    name = "saturate"

    def __init__(self, root: str, w: Workload):
        self.dir = os.path.join(root, "saturate")
        self.ckpt = saturate.Checkpointer(self.dir, keep=1)
        self.w = w
        self.saves = 0
        t0 = time.perf_counter()
        self.ckpt.prepare(w.state(0))
        self.setup = {"prepare_s": time.perf_counter() - t0,
                      "pinned_pool": pool_registration(self.ckpt, w)}

    def save(self, state: Result, step: int) -> None:
        self.ckpt.save(state, step)
        self.saves += 1

    def wait_before_save(self) -> float:
        return 0.0  # on_busy="wait": a save that must wait waits inside save() (timed there)

    def wait_write(self) -> None:
        self.ckpt.wait()

    def writing(self) -> bool:
        s = self.ckpt.stats()
        return s["commits"] + s["failed"] < self.saves

    def last_write_s(self) -> Optional[float]:
        return self.ckpt.stats()["last_write_ns"] / 1e9

    def finish(self) -> Result:
        self.ckpt.wait()
        self.setup["pinned_pool_after_saves"] = pool_registration(self.ckpt, self.w)
        self.ckpt.close()
        s = self.ckpt.stats()
        return {"bytes_written_last": s["last_bytes"], "failed": s["failed"],
                "pool_bytes": s["pool_bytes"], "pool_allocations": s["pool_allocations"],
                "engine_write_bytes_per_s": s["write_bytes_per_s"]}

    def verify(self, refs: dict[str, torch.Tensor]) -> Result:
        state = saturate.Checkpointer.load(self.dir, map_location="cpu")
        return compare(refs, lambda k: lookup(state, k))

    def checkpoint_path(self) -> str:
        return self.dir


def pool_registration(ckpt: Any, w: Workload) -> Optional[Result]:
    """Whether the Checkpointer's host pool is page-locked (CUDA only): Tensor.is_pinned() on
    one byte at each pool buffer's address (cudaPointerGetAttributes; registered memory
    counts). Uses the Checkpointer's private _pool_buffers; None without CUDA or where that
    is missing. (Not cudaHostRegister again: its error code stays CUDA's last error and the
    next kernel launch raises it.)"""
    if not w.cuda or not hasattr(ckpt, "_pool_buffers"):
        return None
    try:
        from saturate.checkpoint import _flatten  # the specs prepare() used
        _, f = _flatten(w.state(0))
        pinned = []
        for ptr, _size in ckpt._pool_buffers(f.specs):
            byte = torch.frombuffer((ctypes.c_uint8 * 1).from_address(ptr), dtype=torch.uint8)
            pinned.append(bool(byte.is_pinned()))
    except Exception as e:  # noqa: BLE001 - a diagnostic: say why, measure anyway
        return {"error": f"{type(e).__name__}: {e}"}
    return {"buffers": len(pinned), "pinned": pinned, "all_pinned": bool(pinned) and all(pinned)}


class DcpMethod:
    """torch.distributed.checkpoint.async_save in one process (no process group)."""

    name = "dcp"

    def __init__(self, root: str, w: Workload):
        self.root = os.path.join(root, "dcp")
        os.makedirs(self.root)
        self.kw = {"no_dist": True} if "no_dist" in inspect.signature(dcp.async_save).parameters \
            else {}
        self.future: Any = None
        self.paths: list[str] = []
        self.done_at: Optional[float] = None
        self.called_at = 0.0
        # torch 2.11 and 2.15 both stage with DefaultStager(StagingOptions(False, False, False,
        # False)) here: every tensor copied to fresh pageable host memory inside the call.
        self.setup: Result = {"stager": "torch's default (async_save without async_stager)"}

    def save(self, state: Result, step: int) -> None:
        path = os.path.join(self.root, f"step-{step}")
        self.paths.append(path)
        self.done_at = None
        out = dcp.async_save(state, checkpoint_id=path, **self.kw)
        staging = getattr(out, "staging_completion", None)
        if staging is not None:  # AsyncSaveResponse: staging may still run; wait (blocked)
            staging.result()
            out = out.upload_completion
        self.future = out
        self.called_at = time.perf_counter()
        out.add_done_callback(self._done)

    def wait_write(self) -> None:
        if self.future is not None:
            self.future.result()

    def _done(self, _fut: Any) -> None:
        self.done_at = time.perf_counter()

    def wait_before_save(self) -> float:
        if self.future is None or self.future.done():
            self._drop_old()
            return 0.0
        t0 = time.perf_counter()
        self.future.result()
        self._drop_old()
        return time.perf_counter() - t0

    def _drop_old(self) -> None:
        if self.future is not None:
            self.future.result()  # raises a failed write here
        for p in self.paths[:-1]:
            shutil.rmtree(p, ignore_errors=True)
        self.paths = self.paths[-1:]

    def writing(self) -> bool:
        return self.future is not None and not self.future.done()

    def last_write_s(self) -> Optional[float]:
        return None if self.done_at is None else self.done_at - self.called_at

    def finish(self) -> Result:
        if self.future is not None:
            self.future.result()
        return {"bytes_written_last": dir_bytes(self.paths[-1]) if self.paths else 0}

    def verify(self, refs: dict[str, torch.Tensor]) -> Result:
        template: Result = {}
        for k, ref in refs.items():
            node = template
            parts = k.split("/")
            for p in parts[:-1]:
                node = node.setdefault(int(p) if p.isdigit() else p, {})
            node[parts[-1]] = torch.empty_like(ref)
        dcp.load(template, checkpoint_id=self.paths[-1], **self.kw)
        return compare(refs, lambda k: lookup(template, k))

    def checkpoint_path(self) -> str:
        return self.paths[-1]


class TorchSaveMethod:
    """torch.save to one file: the loop waits for the whole write."""

    name = "torch.save"

    def __init__(self, root: str, w: Workload):
        self.path = os.path.join(root, "torch", "ckpt.pt")
        os.makedirs(os.path.dirname(self.path))
        self.setup: Result = {"fsync": False}

    def save(self, state: Result, step: int) -> None:
        torch.save(state, self.path)

    def wait_before_save(self) -> float:
        return 0.0

    def wait_write(self) -> None:
        pass

    def writing(self) -> bool:
        return False

    def last_write_s(self) -> Optional[float]:
        return None

    def finish(self) -> Result:
        return {"bytes_written_last": os.path.getsize(self.path)}

    def verify(self, refs: dict[str, torch.Tensor]) -> Result:
        kw = {"mmap": True} if "mmap" in inspect.signature(torch.load).parameters else {}
        state = torch.load(self.path, map_location="cpu", **kw)
        return compare(refs, lambda k: lookup(state, k))

    def checkpoint_path(self) -> str:
        return self.path


# saturate.Checkpointer registers its host pool with cudaHostRegister and never unregisters
# it; the pool is munmap()ed when the Checkpointer is destroyed. Host memory allocated later in
# the process can land at those addresses while CUDA still holds them as registered (pinned),
# so a later device->host copy there (dcp's staging, torch.save) may go to the old pages. Seen
# once on an H100: dcp.async_save after a finished saturate run staged in ~0.25 s instead of
# ~0.75 s and its checkpoint held a wrong optimizer tensor. So the Checkpointers stay alive
# until the process ends, unless --release-saturate-pools (to reproduce that).
KEEP_ALIVE: list[Any] = []

METHOD_CLASSES = {"saturate": SaturateMethod, "dcp": DcpMethod, "torch.save": TorchSaveMethod}


# ------------------------------------------------------------------------------ measuring


def one_save(w: Workload, m: Any, step: int, args: argparse.Namespace, cap_s: float,
             refs_needed: bool) -> tuple[Result, Optional[dict]]:
    """One save and the steps after it: the save's record (and the reference tensors when
    this is the save that will be loaded back)."""
    waited = m.wait_before_save()
    sync(w.dev)
    refs = reference_tensors(w) if refs_needed else None
    cpu0 = cpu_fields()
    t0 = time.perf_counter()
    m.save(w.state(step), step)
    blocked = time.perf_counter() - t0
    clock, flags = StepClock(w.cuda), []
    clock.start()
    t_end = time.perf_counter() + cap_s
    quiet = 0
    n = 0
    while True:
        writing = m.writing()
        if args.every and n >= args.every:
            break  # the next save comes now; a write still running makes it wait (blocked)
        if not args.every and not writing and quiet >= args.quiet_steps:
            break
        if time.perf_counter() > t_end and n >= 1:
            break  # the write outlasts the time this save may take: stop stepping
        flags.append(writing)
        w.step()
        clock.mark()
        n += 1
        quiet += not writing
    times = clock.durations()
    cpu = cpu_share(cpu0, cpu_fields())
    capped = m.writing()
    capped_wait = 0.0
    if capped and not args.every:  # the time cap, not the cadence, ended the steps: wait
        t1 = time.perf_counter()   # here, outside the next save's blocked time
        m.wait_write()
        capped_wait = time.perf_counter() - t1
    rec = {"step": step, "blocked_s": blocked, "waited_before_s": waited,
           "steps": n, "capped": capped, "capped_wait_s": capped_wait, "host_cpu": cpu,
           "during_write_s": [t for t, f in zip(times, flags) if f],
           "quiet_s": [t for t, f in zip(times, flags) if not f]}
    return rec, refs


def mean(xs: list[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


def summarize_method(saves: list[Result], base_mean: float, d2h_s: float,
                     d2h_bulk_s: float) -> Result:
    """Per-method aggregates over its saves (the first save apart: it may pay first-use costs)."""
    blocked = [s["blocked_s"] + s["waited_before_s"] for s in saves]
    during = [t for s in saves for t in s["during_write_s"]]
    quiet = [t for s in saves for t in s["quiet_s"]]
    writes = [s["write_s"] for s in saves if s.get("write_s") is not None]
    later = blocked[1:] or blocked
    out: Result = {
        "saves": len(saves),
        "blocked_first_s": blocked[0],
        "blocked_median_s": statistics.median(later),
        "blocked_max_s": max(blocked),
        "blocked_over_d2h": statistics.median(later) / d2h_s if d2h_s else None,
        "blocked_over_d2h_bulk": statistics.median(later) / d2h_bulk_s if d2h_bulk_s else None,
        "write_median_s": statistics.median(writes) if writes else None,
        "steps_during_write": len(during),
        "step_during_write_mean_s": mean(during),
        "step_quiet_mean_s": mean(quiet),
        "loss_during_write_pct": (100 * (mean(during) / base_mean - 1)) if during else None,
        "loss_during_write_vs_quiet_pct": (100 * (mean(during) / mean(quiet) - 1))
        if during and quiet else None,
        "quiet_vs_baseline_pct": (100 * (mean(quiet) / base_mean - 1)) if quiet else None,
        "capped_saves": sum(1 for s in saves if s["capped"]),
    }
    steps = sum(s["steps"] for s in saves)
    # The whole cost of checkpointing at this cadence: extra wall time over the baseline.
    wall = sum(blocked) + sum(sum(s["during_write_s"]) + sum(s["quiet_s"]) for s in saves)
    out["overhead_pct_at_this_cadence"] = 100 * (wall / (steps * base_mean) - 1) if steps else None
    out["steps_per_save"] = steps / len(saves)
    return out


def run_method(name: str, w: Workload, root: str, args: argparse.Namespace,
               seconds: float, base_mean: float, d2h: Result) -> Result:
    t_start = time.perf_counter()
    m = METHOD_CLASSES[name](root, w)
    log(f"  {name}: setup {time.perf_counter() - t_start:.2f} s {m.setup}")
    saves: list[Result] = []
    refs = None
    step = 1000
    while True:
        left = seconds - (time.perf_counter() - t_start)
        # the last save: when --saves are done or no time for another after this one
        est = mean([s["blocked_s"] + sum(s["during_write_s"]) + sum(s["quiet_s"])
                    for s in saves]) or 0.0
        last = len(saves) + 1 >= args.saves or bool(saves and left < 2.5 * est)
        cap = max(left / max(1, args.saves - len(saves)), 1.0)
        rec, r = one_save(w, m, step, args, cap, refs_needed=bool(last))
        if r is not None:
            refs = r
        if not m.writing():
            rec["write_s"] = m.last_write_s()
        saves.append(rec)
        during = rec["during_write_s"]
        cpu = rec["host_cpu"] or {}
        log(f"  {name} save {len(saves)}: blocked {1e3 * (rec['blocked_s'] + rec['waited_before_s']):.1f} ms, "
            f"{len(during)} steps during the write"
            + (f" (mean {1e3 * mean(during):.2f} ms)" if during else "")
            + f", {rec['steps']} steps; host CPU busy {cpu.get('busy_pct', 0):.0f}% "
            f"iowait {cpu.get('iowait_pct', 0):.0f}% steal {cpu.get('steal_pct', 0):.1f}%"
            + (" (capped: write still running)" if rec["capped"] else ""))
        step += 1000
        if last:
            break
    t_fin = time.perf_counter()
    fin = m.finish()
    if saves[-1].get("write_s") is None and m.last_write_s() is not None:
        saves[-1]["write_s"] = m.last_write_s()
    fin["finish_wait_s"] = time.perf_counter() - t_fin
    t_load = time.perf_counter()
    check = m.verify(refs)
    check["load_s"] = time.perf_counter() - t_load
    summary = summarize_method(saves, base_mean, d2h["per_tensor_s"], d2h["bulk_s"])
    res = {"summary": summary, "setup": m.setup, **fin,
           "load_check": check, "seconds": time.perf_counter() - t_start, "saves": saves}
    if name == "saturate" and not args.release_saturate_pools:
        KEEP_ALIVE.append(m)  # see KEEP_ALIVE
    del m
    return res


def run_workload(model: str, args: argparse.Namespace, dev: torch.device,
                 seconds: float, methods: list[str]) -> Result:
    t_start = time.perf_counter()
    w = BUILDERS[model](args, dev)
    warm = run_steps(w, args.warmup)
    res: Result = {"model": w.info, "build_and_warmup_s": time.perf_counter() - t_start,
                   "warmup_steps": args.warmup, "warmup_last_s": warm[-1] if warm else None}
    cpu0 = cpu_fields()
    base = run_steps(w, args.baseline_steps)
    base_cpu = cpu_share(cpu0, cpu_fields())
    base_mean = mean(base)
    res["baseline"] = {"steps": len(base), "step_mean_s": base_mean,
                       "step_median_s": statistics.median(base),
                       "step_min_s": min(base), "step_max_s": max(base),
                       "steps_per_s": 1 / base_mean, "host_cpu": base_cpu, "step_s": base}
    d2h = d2h_reference(w, 5)
    res["d2h"] = d2h
    res["state_gib"] = d2h["bytes"] / 2**30
    log(f"{model}: {w.info}; state {d2h['bytes'] / 2**30:.3f} GiB in {d2h['tensors']} tensors; "
        f"step {1e3 * base_mean:.2f} ms ({1 / base_mean:.1f} steps/s); "
        f"D2H per tensor {1e3 * d2h['per_tensor_s']:.2f} ms ({d2h['per_tensor_gb_s']:.1f} GB/s), "
        f"bulk {1e3 * d2h['bulk_s']:.2f} ms ({d2h['bulk_gb_s']:.1f} GB/s)")
    res["methods"], res["skipped"] = {}, {}
    left = seconds - (time.perf_counter() - t_start)
    for i, name in enumerate(methods):
        if name.startswith("dcp") and dcp is None:
            res["skipped"][name] = "torch.distributed.checkpoint.async_save is missing (torch < 2.3)"
            continue
        share = left / (len(methods) - i)
        root = tempfile.mkdtemp(prefix=f"gpu-ckpt-{model}-", dir=args.dir)
        t0 = time.perf_counter()
        try:
            res["methods"][name] = run_method(name, w, root, args, share, base_mean, d2h)
        except Exception as e:  # noqa: BLE001 - report it, measure the other methods
            traceback.print_exc()
            res["methods"][name] = {"error": f"{type(e).__name__}: {e}"}
        finally:
            shutil.rmtree(root, ignore_errors=True)
            os.sync()  # torch.save's dirty pages must not flush during the next method
            gc.collect()
        left -= time.perf_counter() - t0
    res["seconds"] = time.perf_counter() - t_start
    del w
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return res


# ------------------------------------------------------------------------------- reporting


def fmt_ms(s: Optional[float]) -> str:
    return "-" if s is None else f"{1e3 * s:.1f}"


def fmt_pct(p: Optional[float]) -> str:
    return "-" if p is None else f"{p:+.2f}%"


def report(res: Result) -> None:
    log("")
    for model, r in res["workloads"].items():
        if "error" in r:
            log(f"{model}: ERROR {r['error']}")
            continue
        d2h = r["d2h"]
        log(f"{model}: state {r['state_gib']:.3f} GiB, {d2h['tensors']} tensors; baseline step "
            f"{fmt_ms(r['baseline']['step_mean_s'])} ms; pinned D2H {fmt_ms(d2h['per_tensor_s'])} ms "
            f"per tensor, {fmt_ms(d2h['bulk_s'])} ms bulk")
        log(f"  {'method':<11} {'saves':>5} {'blocked ms':>11} {'(first)':>8} {'/D2H':>6} "
            f"{'write ms':>9} {'steps in write':>14} {'loss in write':>13} {'vs quiet':>9} "
            f"{'overhead':>9} {'MB written':>10} {'load':>5}")
        for name, m in r["methods"].items():
            if "error" in m:
                log(f"  {name:<11} ERROR {m['error']}")
                continue
            s = m["summary"]
            ratio = "-" if s["blocked_over_d2h"] is None else f"{s['blocked_over_d2h']:.2f}"
            log(f"  {name:<11} {s['saves']:>5} {fmt_ms(s['blocked_median_s']):>11} "
                f"{fmt_ms(s['blocked_first_s']):>8} {ratio:>6} {fmt_ms(s['write_median_s']):>9} "
                f"{s['steps_during_write']:>14} {fmt_pct(s['loss_during_write_pct']):>13} "
                f"{fmt_pct(s['loss_during_write_vs_quiet_pct']):>9} "
                f"{fmt_pct(s['overhead_pct_at_this_cadence']):>9} "
                f"{m['bytes_written_last'] / 1e6:>10.1f} "
                f"{'ok' if m['load_check']['ok'] else 'BAD':>5}")
        for name, why in r.get("skipped", {}).items():
            log(f"  {name:<11} skipped: {why}")
    for b in res["bars"]:
        log(b)


def bars(res: Result) -> list[str]:
    out = []
    cpu = not res["settings"]["device"].startswith("cuda")
    for model, r in res["workloads"].items():
        s = r.get("methods", {}).get("saturate", {}).get("summary")
        if not s:
            continue
        ratio, loss = s["blocked_over_d2h"], s["loss_during_write_pct"]
        out.append(f"bar {model}: saturate blocked / pinned D2H = "
                   f"{'-' if ratio is None else f'{ratio:.2f}'} (<= 1.2: "
                   f"{'met' if ratio is not None and ratio <= 1.2 else 'NOT met'}); throughput "
                   f"loss while writing {fmt_pct(loss)} over {s['steps_during_write']} steps "
                   f"(<= 2%: {'met' if loss is not None and loss <= 2 else 'NOT met' if loss is not None else 'unmeasured'})"
                   + (" [CPU run: a code-path check, not the GPU bars]" if cpu else ""))
    return out


# ----------------------------------------------------------------------------------- main


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="default: %(default)s")
    ap.add_argument("--methods", default=",".join(METHODS), help="default: %(default)s")
    ap.add_argument("--budget", type=float, default=100.0,
                    help="seconds for the whole run, model builds included (default: %(default)s)")
    ap.add_argument("--saves", type=int, default=3,
                    help="saves per method and model, fewer when the budget runs out "
                         "(default: %(default)s)")
    ap.add_argument("--every", type=int, default=0,
                    help="steps between saves; 0: as soon as the previous write committed, "
                         "then --quiet-steps (default: %(default)s)")
    ap.add_argument("--quiet-steps", type=int, default=5,
                    help="steps after the write committed, before the next save "
                         "(default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=10, help="default: %(default)s")
    ap.add_argument("--baseline-steps", type=int, default=30, help="default: %(default)s")
    ap.add_argument("--big-params", type=float, default=100e6,
                    help="parameters of the gpt model; state = 12 bytes each with AdamW "
                         "(default: %(default).0f -> ~1.17 GiB)")
    ap.add_argument("--cnn-arch", default="resnet50", help=argparse.SUPPRESS)  # --smoke: resnet18
    ap.add_argument("--cnn-classes", type=int, default=1000, help=argparse.SUPPRESS)
    ap.add_argument("--cnn-batch", type=int, default=256, help="default: %(default)s")
    ap.add_argument("--cnn-size", type=int, default=224, help="default: %(default)s")
    ap.add_argument("--gpt-dim", type=int, default=1024, help="default: %(default)s")
    ap.add_argument("--gpt-heads", type=int, default=16, help="default: %(default)s")
    ap.add_argument("--gpt-vocab", type=int, default=32768, help="default: %(default)s")
    ap.add_argument("--gpt-seq", type=int, default=512, help="default: %(default)s")
    ap.add_argument("--gpt-batch", type=int, default=16, help="default: %(default)s")
    ap.add_argument("--dir", default=None,
                    help="where checkpoints go (local disk; default: $TMPDIR or /tmp)")
    ap.add_argument("--disk-probe-mib", type=int, default=512,
                    help="dd conv=fsync this many MiB into --dir first, for the disk's write "
                         "speed (0: skip; default: %(default)s)")
    ap.add_argument("--release-saturate-pools", action="store_true",
                    help="free each saturate Checkpointer (and its CUDA-registered pool) right "
                         "after its method instead of at exit; see KEEP_ALIVE in the source")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny models (ResNet-18 at 32 px, a 3-block GPT of width 32), 2 saves "
                         "each, < 60 s on the CPU: a code-path check")
    args = ap.parse_args(argv)
    if args.smoke:
        args.cnn_arch, args.cnn_classes, args.cnn_batch, args.cnn_size = "resnet18", 10, 2, 32
        args.warmup, args.baseline_steps, args.saves, args.quiet_steps = 1, 2, 2, 1
        args.disk_probe_mib = min(args.disk_probe_mib, 32)
        args.gpt_dim, args.gpt_heads, args.gpt_vocab, args.gpt_seq, args.gpt_batch = 32, 4, 256, 16, 2
        args.big_params = 5e4
        args.budget = min(args.budget, 50.0)
    args.models = [m for m in args.models.split(",") if m]
    args.methods = [m for m in args.methods.split(",") if m]
    for kind, got, known in (("models", args.models, MODELS), ("methods", args.methods, METHODS)):
        bad = [x for x in got if x not in known]
        if bad:
            ap.error(f"--{kind}: unknown {', '.join(bad)} (use {', '.join(known)})")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    t_run = time.perf_counter()
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if cuda:
        torch.backends.cudnn.benchmark = True
    args.dir = args.dir or os.environ.get("TMPDIR") or "/tmp"
    settings = {k: v for k, v in vars(args).items() if k != "json"}
    settings["device"] = str(dev)
    res: Result = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                   "machine": machine_info(dev), "settings": settings, "workloads": {},
                   "bars": []}
    res["machine"]["disk_free_gib"] = shutil.disk_usage(args.dir).free / 2**30
    if args.disk_probe_mib:
        probe = os.path.join(args.dir, f"gpu-ckpt-dd-{os.getpid()}.bin")
        mb_s = dd_mb_per_s(probe, args.disk_probe_mib << 20)
        res["machine"]["disk_dd_fsync_mb_s"] = mb_s
        log(f"disk: dd bs=16M conv=fsync of {args.disk_probe_mib} MiB in {args.dir}: {mb_s:.0f} MB/s")
    log(f"checkpoint bench on {dev} ({res['machine'].get('gpu', 'no GPU')}), torch {torch.__version__}, "
        f"saturate {saturate.__file__}; models {args.models}, methods {args.methods}, "
        f"budget {args.budget:.0f} s, dir {args.dir}")
    failed = False
    # the GPT workload gets more of the budget: its saves move 6x the bytes
    weights = {"resnet50": 0.4, "gpt": 0.6}
    for i, model in enumerate(args.models):
        left = args.budget - (time.perf_counter() - t_run) - 3
        share = left * weights[model] / sum(weights[m] for m in args.models[i:])
        log(f"== {model} ({share:.0f} s)")
        try:
            res["workloads"][model] = run_workload(model, args, dev, share, args.methods)
        except Exception as e:  # noqa: BLE001
            failed = True
            traceback.print_exc()
            res["workloads"][model] = {"error": f"{type(e).__name__}: {e}"}
        if any("error" in m for m in res["workloads"][model].get("methods", {}).values()):
            failed = True
        res["bars"] = bars(res)
        res["seconds"] = time.perf_counter() - t_run
        if args.json:  # after every model: a run cut short keeps what it measured
            write_json(res, args.json)
    report(res)
    log(f"total {time.perf_counter() - t_run:.1f} s")
    if args.json:
        log(f"results: {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
