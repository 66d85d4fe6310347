#!/usr/bin/env python3
"""ResNet-50 training on one GPU, fed three ways in one run: saturate, DataLoader, a ceiling.

The same model, optimizer, precision and step run with each feed in turn (issue 7):

  synthetic   the ceiling: one random batch, already on the GPU in the model's input format
              (float16, channels_last), reused every step. No input pipeline at all.
  saturate    saturate.Loader(..., device="cuda") over the packed photos:
              RandomResizedCrop + flip, float16, ImageNet normalization and channels_last,
              delivered as CUDA tensors ready on torch.cuda.current_stream().
  dataloader  torchvision ImageFolder over the same JPEG files + torch.utils.data.DataLoader
              (pin_memory=True, .cuda(non_blocking=True)), the usual recipe:
              RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize on the CPU
              workers. num_workers is swept over --workers and the best is measured for
              --seconds.
  dataloader-gpu  (only when asked for) the same with PILToTensor on the workers: uint8
              over PCIe, float16 + Normalize on the GPU (the tuned recipe, as saturate's).
  saturate-host  (only when asked for) saturate's CPU path (HWC float16 batches in host
              memory) with a plain .to("cuda"): what the device path saves.

Each feed: a fresh model (same seed), --warmup steps untimed (cuDNN autotuning, worker
start-up, first batches), then steps for --seconds. Reported: images/s, the GPU's busy share
(NVML utilization sampled at 10 Hz by saturate.watch, or by NVML through ctypes when saturate
is not importable) over the timed window, the share of the window the host spent blocked
waiting for the next batch, host CPU use, and images/s relative to the synthetic ceiling.
The DataLoader draws its indices from one long random stream of permutations (RandomSampler
with num_samples = many epochs), as on a large dataset; saturate moves from epoch to epoch
by itself. Both drop the last incomplete batch of an epoch.

Bars (issue 7): saturate >= 95% of the synthetic ceiling's images/s with the GPU busy
>= 97%; DataLoader reported.

  python3 bench/gpu_train_bench.py --dataset D.sat --images-root photos/train --json out.json
  python3 bench/gpu_train_bench.py --smoke --dataset D.sat --images-root photos/train
      (tiny: ResNet-18 at 64 px, 3 steps per feed, on the CPU when there is no GPU; the
      saturate CUDA feed is skipped without CUDA)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import itertools
import json
import os
import platform
import random
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, RandomSampler
from torchvision import datasets
from torchvision import transforms as TV

try:
    import saturate
    from saturate import transforms as ST
except ImportError as e:  # the DataLoader and synthetic feeds need no saturate
    saturate, ST, SATURATE_IMPORT_ERROR = None, None, str(e)
else:
    SATURATE_IMPORT_ERROR = ""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
FEEDS = ("synthetic", "saturate", "dataloader", "dataloader-gpu", "saturate-host")
DATALOADERS = ("dataloader", "dataloader-gpu")
Batch = tuple[torch.Tensor, torch.Tensor]
Result = dict[str, Any]

# num_workers above the core count may be part of the sweep on purpose.
warnings.filterwarnings("ignore", message="This DataLoader will create")


def log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------ GPU and host monitor


def read_cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all cores from /proc/stat (busy excludes idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    return total - fields[3] - fields[4], total


class NvmlSampler:
    """NVML's GPU utilization every ``interval`` s on a thread, through ctypes (the fallback
    when saturate is not importable)."""

    class _Utilization(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    def __init__(self, uuid: Optional[str], index: int, interval: float, library: str = ""):
        self.interval = interval
        self.samples: list[tuple[int, float]] = []  # (monotonic ns, util %)
        self._stop = threading.Event()
        self._lib = ctypes.CDLL(library or "libnvidia-ml.so.1")
        if self._lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self._handle = ctypes.c_void_p()
        rc = 1
        if uuid and hasattr(self._lib, "nvmlDeviceGetHandleByUUID"):
            rc = self._lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(self._handle))
        if rc != 0:
            rc = self._lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self._handle))
        if rc != 0:
            raise RuntimeError(f"NVML: no handle for GPU {uuid or index} (error {rc})")
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        u = self._Utilization()
        while not self._stop.is_set():
            if self._lib.nvmlDeviceGetUtilizationRates(self._handle, ctypes.byref(u)) == 0:
                self.samples.append((time.monotonic_ns(), float(u.gpu)))
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._lib.nvmlShutdown()


def torch_gpu_uuid(dev: torch.device) -> Optional[str]:
    """The device's UUID as NVML spells it ("GPU-..."), when torch exposes it."""
    try:
        uuid = getattr(torch.cuda.get_device_properties(dev), "uuid", None)
    except (RuntimeError, AssertionError):  # no CUDA (the monitor's own test on a CPU)
        return None
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


class Monitor:
    """GPU busy % (NVML utilization) and host CPU % over the timed window of one feed.

    Prefers saturate.watch (the C++ sampler: also sub-second utilization and the process
    tree's CPU, DataLoader workers included); falls back to NVML through ctypes.
    """

    def __init__(self, dev: torch.device, interval: float = 0.1, nvml_library: str = ""):
        self.dev, self.interval, self.nvml_library = dev, interval, nvml_library
        self.source = "none"
        self.note = ""
        self._watch = self._nvml = None
        self._tmp: Optional[tempfile.TemporaryDirectory] = None
        self._t0 = self._t1 = 0
        self._cpu0 = self._cpu1 = (0, 0)

    def __enter__(self) -> "Monitor":
        if self.dev.type != "cuda":
            self.note = "no GPU"
            return self
        uuid = torch_gpu_uuid(self.dev)
        if saturate is not None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gpu-train-bench-watch-")
            self._watch = saturate.watch(self._tmp.name, interval=self.interval,
                                         nvml_library=self.nvml_library).start()
            self.source = "saturate.watch"
            self._uuid = uuid
            return self
        try:
            self._nvml = NvmlSampler(uuid, self.dev.index or 0, self.interval,
                                     self.nvml_library)
            self._nvml.start()
            self.source = "nvml-ctypes"
        except (OSError, RuntimeError) as e:
            self.note = f"no NVML: {e}"
        return self

    def window_start(self) -> None:
        self._t0, self._cpu0 = time.monotonic_ns(), read_cpu_times()

    def window_end(self) -> None:
        self._t1, self._cpu1 = time.monotonic_ns(), read_cpu_times()

    def __exit__(self, *exc) -> None:
        if self._watch is not None:
            self._watch.stop()
        if self._nvml is not None:
            self._nvml.stop()

    def result(self) -> Result:
        busy = self._cpu1[0] - self._cpu0[0]
        total = self._cpu1[1] - self._cpu0[1]
        out: Result = {"monitor": self.source,
                       "host_cpu_pct": round(100.0 * busy / total, 1) if total > 0 else None,
                       "gpu_busy_pct": None}
        if self.note:
            out["monitor_note"] = self.note
        if self._watch is not None:
            out.update(self._watch_result())
        elif self._nvml is not None:
            util = [u for t, u in self._nvml.samples if self._t0 <= t <= self._t1]
            out["gpu_samples"] = len(util)
            out["gpu_busy_pct"] = round(sum(util) / len(util), 2) if util else None
        return out

    def _watch_result(self) -> Result:
        run = Path(self._tmp.name)
        meta = json.loads((run / "meta.json").read_text())
        start = int(meta["start_monotonic_ns"])
        gpus = meta.get("gpus", [])
        pick = self.dev.index or 0
        for g in gpus:  # the NVML index of the GPU torch uses
            if self._uuid and g.get("uuid") == self._uuid:
                pick = g["index"]
        util, sampled, tree = [], [], []
        with open(run / "samples.jsonl") as f:
            for line in f:
                try:
                    s = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a last line cut short
                if not self._t0 <= start + s["t_ns"] <= self._t1:
                    continue
                if "cpu_pct" in s.get("tree", {}):
                    tree.append(s["tree"]["cpu_pct"])
                for g in s.get("gpus", []):
                    if g.get("index") == pick:
                        if "util_pct" in g:
                            util.append(g["util_pct"])
                        if "util_sampled_pct" in g:
                            sampled.append(g["util_sampled_pct"])
        mean = lambda v: round(sum(v) / len(v), 2) if v else None  # noqa: E731
        self._tmp.cleanup()
        return {"gpu_status": meta.get("gpu_status"), "gpu_samples": len(util),
                "gpu_busy_pct": mean(util), "gpu_busy_sampled_pct": mean(sampled),
                "process_tree_cpu_pct": mean(tree)}


# ---------------------------------------------------------------------------- training


class Trainer:
    """One model, SGD, AMP (fp16 + GradScaler, or bf16) and channels_last on CUDA."""

    def __init__(self, args: argparse.Namespace, num_classes: int, dev: torch.device):
        torch.manual_seed(args.seed)
        self.dev = dev
        self.cuda = dev.type == "cuda"
        self.model = getattr(torchvision.models, args.arch)(num_classes=num_classes)
        fmt = torch.channels_last if self.cuda else torch.preserve_format
        self.model.to(dev, memory_format=fmt).train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1 * args.batch / 256,
                                   momentum=0.9, weight_decay=1e-4)
        self.amp_dtype = torch.float16 if args.amp == "fp16" else torch.bfloat16
        use_scaler = self.cuda and args.amp == "fp16"
        if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3; torch.cuda.amp's is deprecated
            self.scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
        else:
            self.scaler = torch.cuda.amp.GradScaler(enabled=use_scaler)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if not self.cuda:
            x = x.float()  # no autocast on the CPU: the weights are float32
        # (torch 1.13's CPU autocast refuses fp16 even when disabled: no context at all there)
        amp = (torch.autocast(device_type="cuda", dtype=self.amp_dtype) if self.cuda
               else contextlib.nullcontext())
        with amp:
            loss = F.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.detach()


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def wait_percentiles_ms(waits: list[float]) -> Result:
    """p50, p99 and max of the per-step waits for a batch, in ms: a few long waits
    (an epoch's start, say) and a steady trickle cost the same data wait %."""
    if not waits:
        return {}
    w = sorted(waits)
    at = lambda q: round(1e3 * w[min(len(w) - 1, int(q * len(w)))], 3)  # noqa: E731
    return {"p50": at(0.5), "p99": at(0.99), "max": round(1e3 * w[-1], 3)}


def describe(x: torch.Tensor, y: torch.Tensor) -> Result:
    """What a feed delivered (its first batch after the feed's own conversions)."""
    return {"image_shape": list(x.shape), "image_dtype": str(x.dtype).replace("torch.", ""),
            "image_device": str(x.device),
            "channels_last": x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last),
            "label_dtype": str(y.dtype).replace("torch.", ""), "label_device": str(y.device)}


def measure(name: str, batches: Iterator[Batch], args: argparse.Namespace, num_classes: int,
            dev: torch.device, seconds: float) -> Result:
    """Warmup, then steps for ``seconds`` (or --steps); images/s, GPU busy %, data wait %."""
    trainer = Trainer(args, num_classes, dev)
    first: Result = {}
    with Monitor(dev, nvml_library=args.nvml_library) as mon:
        for i in range(args.warmup):
            x, y = next(batches)
            if i == 0:
                first = describe(x, y)
            trainer.step(x, y)
            x = y = None  # release the batch (saturate's buffers go back to its pool)
        sync(dev)
        mon.window_start()
        t0 = time.perf_counter()
        steps = images = 0
        waits: list[float] = []
        loss = None
        while True:
            a = time.perf_counter()
            x, y = next(batches)
            waits.append(time.perf_counter() - a)
            if not first:
                first = describe(x, y)
            loss = trainer.step(x, y)
            steps += 1
            images += x.shape[0]
            x = y = None
            if steps >= args.steps or time.perf_counter() - t0 >= seconds:
                break
        sync(dev)
        elapsed = time.perf_counter() - t0
        mon.window_end()
    r: Result = {"feed": name, "images_per_s": images / elapsed, "steps": steps, "images": images,
                 "seconds": round(elapsed, 3),
                 "data_wait_pct": round(100.0 * sum(waits) / elapsed, 2),
                 "data_wait_ms": wait_percentiles_ms(waits),
                 "loss": float(loss) if loss is not None else None, "delivered": first}
    r.update(mon.result())
    if dev.type == "cuda":
        r["gpu_mem_peak_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
        torch.cuda.reset_peak_memory_stats(dev)
    del trainer
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    busy = r.get("gpu_busy_pct")
    log(f"   {name}: {r['images_per_s']:.1f} images/s over {steps} steps ({elapsed:.1f} s), "
        f"GPU busy {busy if busy is not None else 'n/a'}%, data wait {r['data_wait_pct']}%")
    return r


# ------------------------------------------------------------------------------- feeds


def synthetic_batches(args: argparse.Namespace, num_classes: int, dev: torch.device):
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    dtype = torch.float16 if dev.type == "cuda" else torch.float32
    x = torch.randn(args.batch, 3, args.size, args.size, generator=g).to(dev, dtype)
    if dev.type == "cuda":
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, num_classes, (args.batch,), generator=g).to(dev)
    return itertools.repeat((x, y))


def to_model_input(x: torch.Tensor, y: torch.Tensor, dev: torch.device) -> Batch:
    """NCHW channels_last on ``dev`` (an HWC batch becomes a view); labels on ``dev``."""
    if x.device != dev:
        x = x.to(dev, non_blocking=True)
    if x.dim() == 4 and x.shape[1] != 3 and x.shape[-1] == 3:
        x = x.permute(0, 3, 1, 2)  # [B, H, W, C] -> an NCHW channels_last view, no copy
    if dev.type == "cuda":
        x = x.contiguous(memory_format=torch.channels_last)  # a no-op when it already is
    if y.device != dev:
        y = y.to(dev, non_blocking=True)
    return x, y


class SaturateFeed:
    """saturate.Loader batches as (x, y) on the device, epoch after epoch."""

    def __init__(self, args: argparse.Namespace, dev: torch.device, on_device: bool):
        layout = "channels_last" if on_device else "hwc"
        image = ST.Compose([ST.RandomResizedCrop(args.size), ST.RandomHorizontalFlip(),
                            ST.ToDtype("float16"),
                            ST.Normalize(ST.IMAGENET_MEAN, ST.IMAGENET_STD),
                            ST.ToLayout(layout)])
        kwargs: dict[str, Any] = {"device": "cuda"} if on_device else {}
        self.loader = saturate.Loader(args.dataset, batch_size=args.batch, shuffle=True,
                                      seed=args.seed, drop_last=True, threads=args.threads,
                                      transforms={"image": image}, **kwargs)
        self.dev, self.threads_auto = dev, args.threads == "auto"
        self.arrived: Result = {}
        self._epoch = iter(self.loader)

    def __iter__(self) -> "SaturateFeed":
        return self

    def __next__(self) -> Batch:
        # No generator of our own: a suspended frame would keep the previous batch alive.
        try:
            b = next(self._epoch)
        except StopIteration:  # the loader has moved on to the next epoch by itself
            self._epoch = iter(self.loader)
            b = next(self._epoch)
        if not self.arrived:
            self.arrived = describe(b["image"], b["label"])
        return to_model_input(b["image"], b["label"], self.dev)

    def setting(self) -> str:
        s = self.loader.stats()
        return (f"threads={s.get('threads')}{' (auto)' if self.threads_auto else ''}, "
                f"prefetch={s.get('prefetch')}")


class TorchFeed:
    """ImageFolder + DataLoader batches as (x, y) on the device."""

    def __init__(self, args: argparse.Namespace, dev: torch.device, workers: int,
                 normalize: str):
        head = [TV.RandomResizedCrop(args.size), TV.RandomHorizontalFlip()]
        if normalize == "cpu":
            tail = [TV.ToTensor(), TV.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        else:
            tail = [TV.PILToTensor()]
        dataset = datasets.ImageFolder(args.images_root, transform=TV.Compose(head + tail))
        g = torch.Generator().manual_seed(args.seed)
        # One long stream of permutations: no epoch-boundary restart inside the measurement,
        # as on an ImageNet-sized dataset whose epoch outlasts it.
        sampler = RandomSampler(dataset, num_samples=len(dataset) * 10_000, generator=g)
        cuda = dev.type == "cuda"
        self.loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler,
                                 num_workers=workers, pin_memory=cuda, drop_last=True,
                                 generator=torch.Generator().manual_seed(args.seed))
        self.dev, self.workers, self.normalize = dev, workers, normalize
        if normalize == "gpu":
            dtype = torch.float16 if cuda else torch.float32
            self.mean = torch.tensor(IMAGENET_MEAN, device=dev, dtype=dtype).view(1, 3, 1, 1) * 255
            self.std = torch.tensor(IMAGENET_STD, device=dev, dtype=dtype).view(1, 3, 1, 1) * 255
        self.arrived: Result = {}
        self._it = iter(self.loader)

    def __iter__(self) -> "TorchFeed":
        return self

    def __next__(self) -> Batch:
        x, y = next(self._it)
        if not self.arrived:
            self.arrived = describe(x, y)
        x, y = to_model_input(x, y, self.dev)
        if self.normalize == "gpu":  # uint8 -> (x - 255 mean) / (255 std) in the model's dtype
            x = (x.to(self.mean.dtype) - self.mean) / self.std
        return x, y

    def close(self) -> None:
        self._it = None  # the DataLoader iterator shuts its workers down when released
        gc.collect()


# --------------------------------------------------------------------------------- run


def plan_seconds(args: argparse.Namespace, feeds: list[str]) -> tuple[float, float]:
    """(--seconds, --sweep-seconds), shrunk to fit --budget when one is given."""
    loaders = sum(f in DATALOADERS for f in feeds)
    sweep = loaders * len(args.workers) if len(args.workers) > 1 else 0
    seconds = args.seconds
    if args.budget:
        runs = len(feeds) + sweep
        # imports, cuDNN autotuning, model builds, warmups, worker start-ups: an estimate on
        # the safe side, as a run cut off by the caller's time limit loses its last feed
        fixed = 30 + 10 * runs
        fit = (args.budget - fixed) / (len(feeds) + sweep / 3)
        seconds = max(5.0, min(seconds, fit))
    sweep_seconds = args.sweep_seconds or max(5.0, seconds / 3)
    return seconds, sweep_seconds


def count_classes(args: argparse.Namespace) -> int:
    if args.images_root and os.path.isdir(args.images_root):
        return len([d for d in os.scandir(args.images_root) if d.is_dir()])
    if args.dataset and os.path.isfile(os.path.join(args.dataset, "manifest.json")):
        with open(os.path.join(args.dataset, "manifest.json")) as f:
            names = json.load(f).get("class_names") or []
        if names:
            return len(names)
    return 1000


def machine_info(dev: torch.device) -> Result:
    info: Result = {"host": platform.node(), "cores": os.cpu_count(),
                    "platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "torchvision": torchvision.__version__,
                    "saturate": getattr(saturate, "__version__", None),
                    "saturate_path": getattr(saturate, "__file__", None),
                    "saturate_import_error": SATURATE_IMPORT_ERROR or None}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1),
                    sms=p.multi_processor_count, cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version())
    return info


def run_feed(name: str, args: argparse.Namespace, num_classes: int, dev: torch.device,
             seconds: float, sweep_seconds: float) -> Result:
    if name == "synthetic":
        r = measure(name, synthetic_batches(args, num_classes, dev), args, num_classes, dev,
                    seconds)
        r["setting"] = "one GPU-resident random batch" if dev.type == "cuda" else "one batch"
        return r
    if name in ("saturate", "saturate-host"):
        feed = SaturateFeed(args, dev, on_device=name == "saturate")
        r = measure(name, feed, args, num_classes, dev, seconds)
        r["arrived"] = feed.arrived
        r["setting"] = feed.setting()
        r["loader_stats"] = feed.loader.stats()
        del feed  # the loader's threads stop before the next feed's measurement starts
        gc.collect()
        return r
    # dataloader(-gpu): sweep num_workers, then measure the best for --seconds
    normalize = "gpu" if name == "dataloader-gpu" else "cpu"
    sweep: list[Result] = []
    if len(args.workers) > 1:
        for w in args.workers:
            log(f"   DataLoader num_workers={w} ({sweep_seconds:.0f} s)")
            feed = TorchFeed(args, dev, w, normalize)
            try:
                s = measure(f"{name} num_workers={w}", feed, args, num_classes, dev,
                            sweep_seconds)
            finally:
                feed.close()
            s["num_workers"] = w
            sweep.append(s)
        best = max(sweep, key=lambda s: s["images_per_s"])["num_workers"]
    else:
        best = args.workers[0]
    log(f"   DataLoader num_workers={best}: the measurement")
    feed = TorchFeed(args, dev, best, normalize)
    try:
        r = measure(name, feed, args, num_classes, dev, seconds)
    finally:
        feed.close()
    r["arrived"] = feed.arrived
    r["num_workers"] = best
    r["setting"] = (f"num_workers={best}" + (" (best of " + ",".join(map(str, args.workers))
                                              + ")" if sweep else "")
                    + f", normalize on {normalize.upper()}")
    r["sweep"] = sweep
    return r


def pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def p99(r: Result) -> str:
    v = r.get("data_wait_ms", {}).get("p99")
    return "n/a" if v is None else f"{v:.2f}"


def report(res: Result) -> None:
    feeds = res["feeds"]
    ceiling = feeds.get("synthetic", {}).get("images_per_s")
    print()
    print(f"{res['settings']['arch']}, batch {res['settings']['batch']}, "
          f"{res['settings']['size']} px, AMP {res['settings']['amp']}, "
          f"on {res['machine'].get('gpu', 'CPU')} ({res['machine']['cores']} cores)")
    hdr = f"{'feed':<14} {'images/s':>9} {'/ceiling':>8} {'GPU busy %':>10} " \
          f"{'data wait %':>11} {'wait p99 ms':>11} {'host CPU %':>10} {'steps':>6}  setting"
    print(hdr)
    print("-" * len(hdr))
    for name, r in feeds.items():
        if "error" in r:
            print(f"{name:<14} ERROR: {r['error']}")
            continue
        ratio = f"{r['images_per_s'] / ceiling:.3f}" if ceiling else "n/a"
        print(f"{name:<14} {r['images_per_s']:>9.1f} {ratio:>8} {pct(r.get('gpu_busy_pct')):>10} "
              f"{pct(r['data_wait_pct']):>11} {p99(r):>11} {pct(r.get('host_cpu_pct')):>10} "
              f"{r['steps']:>6}  "
              f"{r.get('setting', '')}")
        for s in r.get("sweep", []):
            print(f"  {'sweep':<12} {s['images_per_s']:>9.1f} "
                  f"{(s['images_per_s'] / ceiling if ceiling else 0):>8.3f} "
                  f"{pct(s.get('gpu_busy_pct')):>10} {pct(s['data_wait_pct']):>11} "
                  f"{p99(s):>11} {pct(s.get('host_cpu_pct')):>10} {s['steps']:>6}  num_workers={s['num_workers']}")
    for name, why in res["skipped"].items():
        print(f"{name:<14} skipped: {why}")
    if res["ratios"]:
        print("ratios: " + ", ".join(f"{k} {v:.3f}" for k, v in res["ratios"].items()))
    for bar in res["bars"]:
        print(f"bar: {bar['bar']}: measured {bar['measured']} -> {bar['verdict']}")


def summarize(res: Result) -> None:
    """Fills res["ratios"] and res["bars"] from the feeds measured so far."""
    ok = {k: v for k, v in res["feeds"].items() if "error" not in v}
    ratios: dict[str, float] = {}
    bars: list[Result] = []
    ceiling = ok.get("synthetic", {}).get("images_per_s")
    for name in ("saturate", *DATALOADERS, "saturate-host"):
        if ceiling and name in ok:
            ratios[f"{name}/ceiling"] = ok[name]["images_per_s"] / ceiling
    for name in DATALOADERS:
        if "saturate" in ok and name in ok:
            ratios[f"saturate/{name}"] = (ok["saturate"]["images_per_s"]
                                          / ok[name]["images_per_s"])
    if "saturate/ceiling" in ratios:
        r = ratios["saturate/ceiling"]
        busy = ok["saturate"].get("gpu_busy_pct")
        bars.append({"bar": "saturate >= 0.95 x synthetic ceiling images/s",
                     "measured": round(r, 3), "verdict": "met" if r >= 0.95 else "NOT met"})
        bars.append({"bar": "GPU busy >= 97% fed by saturate", "measured": busy,
                     "verdict": "n/a" if busy is None else ("met" if busy >= 97 else "NOT met")})
    res["ratios"], res["bars"] = ratios, bars


def write_json(res: Result, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=2)
    os.replace(tmp, path)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", help="packed saturate dataset (saturate pack folder ...)")
    ap.add_argument("--images-root", help="the same images as an ImageFolder (ROOT/<class>/*.jpg)")
    ap.add_argument("--feeds", default=",".join(FEEDS[:3]),
                    help=f"comma-separated subset of {','.join(FEEDS)} (default: %(default)s)")
    ap.add_argument("--arch", default="resnet50", help="torchvision model (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=256, help="default: %(default)s")
    ap.add_argument("--size", type=int, default=224, help="crop size in px (default: %(default)s)")
    ap.add_argument("--amp", choices=("fp16", "bf16"), default="fp16",
                    help="autocast dtype; fp16 uses a GradScaler (default: %(default)s)")
    ap.add_argument("--seconds", type=float, default=60.0,
                    help="timed seconds per feed (default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=15,
                    help="untimed steps per feed (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=10**9,
                    help="stop a feed's timed window after this many steps too")
    ap.add_argument("--workers", default=None,
                    help="DataLoader num_workers to sweep, e.g. 8,12,16; the best is measured "
                         "(default: 8,12,16; --smoke: 2)")
    ap.add_argument("--sweep-seconds", type=float, default=0.0,
                    help="timed seconds per swept num_workers (default: --seconds / 3)")
    ap.add_argument("--threads", default="auto", help="saturate threads (default: %(default)s)")
    ap.add_argument("--budget", type=float, default=0.0,
                    help="seconds the whole run may take: shrinks --seconds to fit")
    ap.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    ap.add_argument("--nvml-library", default="", metavar="PATH",
                    help="libnvidia-ml to sample GPU utilization with (default: the usual names)")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--smoke", action="store_true",
                    help="a code-path check: resnet18, 64 px, batch 8, 1 warmup + 3 steps per "
                         "feed, num_workers 2; runs on the CPU without CUDA")
    args = ap.parse_args(argv)

    if args.smoke:
        args.arch, args.size, args.batch, args.warmup, args.steps = "resnet18", 64, 8, 1, 3
    if args.workers is None:
        args.workers = "2" if args.smoke else "8,12,16"
    args.workers = [int(w) for w in str(args.workers).split(",") if w.strip()]
    if args.threads != "auto":
        args.threads = int(args.threads)
    feeds = [f.strip() for f in args.feeds.split(",") if f.strip()]
    unknown = [f for f in feeds if f not in FEEDS]
    if unknown:
        ap.error(f"--feeds: unknown {', '.join(unknown)} (use {', '.join(FEEDS)})")
    feeds = [f for f in FEEDS if f in feeds]  # the ceiling first

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if cuda:
        torch.backends.cudnn.benchmark = True  # what a training script sets for fixed shapes

    skipped: dict[str, str] = {}
    runnable = []
    for f in feeds:
        if f == "saturate" and not cuda:
            skipped[f] = "needs CUDA (torch.cuda.is_available() is False)"
        elif f in ("saturate", "saturate-host") and saturate is None:
            skipped[f] = f"saturate is not importable: {SATURATE_IMPORT_ERROR}"
        elif f in ("saturate", "saturate-host") and not args.dataset:
            skipped[f] = "no --dataset"
        elif f in DATALOADERS and not args.images_root:
            skipped[f] = "no --images-root"
        else:
            runnable.append(f)
    for f, why in skipped.items():
        log(f"skipping {f}: {why}")

    num_classes = count_classes(args)
    seconds, sweep_seconds = plan_seconds(args, runnable)
    settings = {k: v for k, v in vars(args).items() if k not in ("json",)}
    settings.update(feeds=runnable, seconds=seconds, sweep_seconds=sweep_seconds,
                    num_classes=num_classes, device=str(dev))
    if not cuda:
        settings["amp"] = "off (CPU)"
    log(f"{args.arch} batch {args.batch} at {args.size} px, AMP {settings['amp']}, on {dev}; feeds "
        f"{', '.join(runnable)}; {seconds:.0f} s"
        + (f" or {args.steps} steps" if args.steps < 10**9 else "")
        + f" each after {args.warmup} warmup steps"
        + (f" (DataLoader sweep {sweep_seconds:.0f} s per num_workers in {args.workers})"
           if set(DATALOADERS) & set(runnable) and len(args.workers) > 1 else ""))

    res: Result = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                   "machine": machine_info(dev), "settings": settings, "feeds": {},
                   "skipped": skipped, "ratios": {}, "bars": []}
    failed = False
    for name in runnable:
        log(f"== {name}")
        try:
            res["feeds"][name] = run_feed(name, args, num_classes, dev, seconds, sweep_seconds)
        except Exception as e:  # noqa: BLE001 - report it and go on with the other feeds
            failed = True
            traceback.print_exc()
            res["feeds"][name] = {"error": f"{type(e).__name__}: {e}",
                                  "traceback": traceback.format_exc()}
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
        summarize(res)
        if args.json:  # after every feed: a run cut short by a time limit keeps what it measured
            write_json(res, args.json)
    report(res)
    if args.json:
        print(f"results: {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
