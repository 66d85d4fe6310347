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

The matrix (issue 25, on when --model, --cores, --decode or --matrix is given): models x host
cores x feeds x saturate's decode (cpu, gpu = nvJPEG, auto), each cell in a child process
pinned to the first N cores of this one's affinity (every thread, before the cell starts);
loader threads, DataLoader workers and DALI threads = N - --spare-cores (default 1: the
training thread keeps a core). The synthetic ceiling runs once per model on all the cores.
A dali feed (fn.decoders.image device="mixed", random_resized_crop, crop_mirror_normalize
to float16 NHWC) runs when nvidia.dali imports. A cell that cannot run (no decode= in this
saturate, UnavailableError, DALI missing, more cores than here) is a row "unavailable: why";
a failing cell is a row "error"; --budget shrinks the seconds per cell (down to
--min-seconds) and skips what would not fit. Goals: ResNet-50 from 2 cores and ResNet-18 from
8 cores >= 0.95 of the ceiling; saturate ahead of DALI at equal cores.

  python3 bench/gpu_train_bench.py --matrix default --amp bf16 --budget 140
      --dataset D.sat --images-root photos/train --json matrix.json
  python3 bench/gpu_train_bench.py --model resnet50,resnet18 --cores 2,4,8,16
      --feeds saturate,dataloader,dali --decode cpu,gpu,auto --amp bf16 ...

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
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional

T_START = time.time()  # --budget counts from here (the imports below take seconds)

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
FEEDS = ("synthetic", "saturate", "dataloader", "dataloader-gpu", "saturate-host", "dali")
DATALOADERS = ("dataloader", "dataloader-gpu")
Batch = tuple[torch.Tensor, torch.Tensor]
Result = dict[str, Any]

# num_workers above the core count may be part of the sweep on purpose.
warnings.filterwarnings("ignore", message="This DataLoader will create")


def log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------ GPU and host monitor


def read_cpu_times(cpus: Optional[list[int]] = None) -> tuple[int, int]:
    """(busy, total) jiffies from /proc/stat (busy excludes idle and iowait): of all cores, or
    summed over ``cpus`` (a matrix cell's pinned cores)."""
    busy = total = 0
    with open("/proc/stat") as f:
        if cpus is None:
            lines = [f.readline()]
        else:
            want = {f"cpu{c}" for c in cpus}
            lines = [ln for ln in f if ln.split(" ", 1)[0] in want]
    for line in lines:
        fields = [int(v) for v in line.split()[1:]]
        t = sum(fields[:8])  # user nice system idle iowait irq softirq steal
        busy, total = busy + t - fields[3] - fields[4], total + t
    return busy, total


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

    def __init__(self, dev: torch.device, interval: float = 0.1, nvml_library: str = "",
                 cpus: Optional[list[int]] = None):
        self.dev, self.interval, self.nvml_library = dev, interval, nvml_library
        self.cpus = cpus  # host CPU % over these cores only (a matrix cell's)
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
        self._t0, self._cpu0 = time.monotonic_ns(), read_cpu_times(self.cpus)

    def window_end(self) -> None:
        self._t1, self._cpu1 = time.monotonic_ns(), read_cpu_times(self.cpus)

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
    """Warmup, then steps for ``seconds`` (or --steps); images/s, GPU busy %, data wait %.

    In the matrix (--cores), the warmup goes on past --warmup steps until the batches the
    feed held ready at the start are used up: until ``batches.backlog()`` (saturate: ready,
    not yet delivered) is <= 1, then ``batches.backlog_tail`` steps more (the device stage's
    copies ahead), or else for ``batches.depth`` + 2 steps (prefetch queues, DataLoader
    workers x prefetch_factor). A short window must not start on a backlog that a
    loader-bound feed could not sustain."""
    trainer = Trainer(args, num_classes, dev)
    first: Result = {}
    matrix = getattr(args, "matrix_mode", False)
    depth = getattr(batches, "depth", 0) if matrix else 0
    backlog = getattr(batches, "backlog", None) if matrix else None
    tail = getattr(batches, "backlog_tail", 0)
    warmup, drained_at = 0, None
    with Monitor(dev, nvml_library=args.nvml_library,
                 cpus=getattr(args, "cell_cpus", None)) as mon:
        while True:
            if warmup >= args.warmup:
                if warmup >= depth + 2:
                    break
                if backlog is not None:
                    if drained_at is None and backlog() <= 1:
                        drained_at = warmup
                    if drained_at is not None and warmup >= drained_at + tail:
                        break
            x, y = next(batches)
            if warmup == 0:
                first = describe(x, y)
            trainer.step(x, y)
            x = y = None  # release the batch (saturate's buffers go back to its pool)
            warmup += 1
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
                 "loss": float(loss) if loss is not None else None, "delivered": first,
                 "warmup_steps": warmup}
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
        self.decode = getattr(args, "decode", None) or "cpu"
        if self.decode != "cpu":  # nvJPEG: only passed when asked for (older builds lack it)
            kwargs["decode"] = self.decode
        self.loader = saturate.Loader(args.dataset, batch_size=args.batch, shuffle=True,
                                      seed=args.seed, drop_last=True, threads=args.threads,
                                      transforms={"image": image}, **kwargs)
        self.dev, self.threads_auto = dev, args.threads == "auto"
        self.arrived: Result = {}
        self._epoch = iter(self.loader)
        prefetch = self.loader.stats().get("prefetch")
        self.depth = (prefetch if isinstance(prefetch, int) else 4) + (2 if on_device else 0)
        self.backlog_tail = 2 if on_device else 0  # device_prefetch

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

    def backlog(self) -> int:
        """Batches made and not yet handed out (the host queue)."""
        s = self.loader.stats()
        return int(s.get("batches_ready", 0)) - int(s.get("batches_delivered", 0))

    def setting(self) -> str:
        s = self.loader.stats()
        return (f"threads={s.get('threads')}{' (auto)' if self.threads_auto else ''}, "
                f"prefetch={s.get('prefetch')}"
                + (f", decode={self.decode}" if self.decode != "cpu" else "")
                + (f" [backend {s.get('decode_backend') or 'cpu'}, GPU share "
                   f"{s.get('gpu_decode_fraction')}]"
                   if self.decode != "cpu" and "gpu_decode_fraction" in s else ""))


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
        self.depth = 2 * workers  # prefetch_factor (2) batches per worker
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


def dali_available() -> str:
    """'' when nvidia.dali imports, else why not (the GPU machine has no DALI wheel: 199 MB)."""
    try:
        import nvidia.dali  # noqa: F401
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except ImportError as e:
        return f"nvidia.dali not installed ({e})"
    except Exception as e:  # noqa: BLE001 - a broken install is unavailable too
        return f"nvidia.dali does not import: {type(e).__name__}: {e}"
    return ""


class DaliFeed:
    """DALI's GPU pipeline over the same JPEG folder (ImageFolder layout) as (x, y) on the device.

    fn.readers.file (shuffled) -> fn.decoders.image(device="mixed": nvJPEG, the H100's hardware
    JPEG decoder for part of the load) -> fn.random_resized_crop(size) on the GPU ->
    fn.crop_mirror_normalize(float16, HWC, ImageNet mean/std, random mirror) -> an NHWC tensor,
    viewed as NCHW channels_last. With --dali-fused: fn.decoders.image_random_crop (decodes the
    crop's region only) + fn.resize, as DALI's own ResNet-50 example does. num_threads: the
    loader threads of the cell. Without CUDA (the --smoke check) the decoder runs on the CPU.
    """

    def __init__(self, args: argparse.Namespace, dev: torch.device, threads: int):
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        cuda = dev.type == "cuda"
        fused = getattr(args, "dali_fused", False)
        size = args.size
        mean = [255 * m for m in IMAGENET_MEAN]
        std = [255 * v for v in IMAGENET_STD]

        @pipeline_def
        def pipeline():
            jpegs, labels = fn.readers.file(file_root=args.images_root, random_shuffle=True,
                                            name="Reader")
            decoder = "mixed" if cuda else "cpu"
            # paddings as in DALI's ResNet-50 example: no reallocation in the steady state
            pads = ({"device_memory_padding": 211025920, "host_memory_padding": 140544512}
                    if cuda else {})
            if fused:
                images = fn.decoders.image_random_crop(jpegs, device=decoder,
                                                       output_type=types.RGB, **pads)
                images = fn.resize(images, resize_x=size, resize_y=size)
            else:
                images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB, **pads)
                images = fn.random_resized_crop(images, size=size)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="HWC",
                                              mean=mean, std=std,
                                              mirror=fn.random.coin_flip(probability=0.5))
            return images, (labels.gpu() if cuda else labels)

        self.pipe = pipeline(batch_size=args.batch, num_threads=threads,
                             device_id=(dev.index or 0) if cuda else None, seed=args.seed + 1,
                             prefetch_queue_depth=2)
        self.pipe.build()
        self._it = DALIGenericIterator(self.pipe, ["image", "label"], reader_name="Reader",
                                       last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
        self.dev, self.threads, self.fused = dev, threads, fused
        self.depth = 2 + 1  # prefetch_queue_depth + the iterator's own batch
        self.arrived: Result = {}

    def __iter__(self) -> "DaliFeed":
        return self

    def __next__(self) -> Batch:
        try:
            out = next(self._it)
        except StopIteration:  # the end of an epoch; auto_reset has rewound the reader
            out = next(self._it)
        x, y = out[0]["image"], out[0]["label"]
        if not self.arrived:
            self.arrived = describe(x, y)
        return to_model_input(x, y.reshape(-1).long(), self.dev)

    def setting(self) -> str:
        dec = ("image_random_crop+resize" if self.fused else "image+random_resized_crop")
        where = "mixed" if self.dev.type == "cuda" else "cpu"
        return f"DALI num_threads={self.threads}, decoders.{dec} device={where}"

    def close(self) -> None:
        self._it = None
        self.pipe = None
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
    if name == "dali":
        threads = getattr(args, "loader_threads", 0) or max(1, (os.cpu_count() or 2) - 1)
        feed = DaliFeed(args, dev, threads)
        try:
            r = measure(name, feed, args, num_classes, dev, seconds)
        finally:
            feed.close()
        r["arrived"] = feed.arrived
        r["setting"] = feed.setting()
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
    for name in ("saturate", *DATALOADERS, "saturate-host", "dali"):
        if ceiling and name in ok:
            ratios[f"{name}/ceiling"] = ok[name]["images_per_s"] / ceiling
    for name in (*DATALOADERS, "dali"):
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


# ----------------------------------------------------------------- the matrix (--cores)
#
# Each (model, cores, feed, decode) cell runs in a child process (this script with
# --child-spec) pinned to the first N cores of the parent's affinity: every thread of the child
# (os.sched_setaffinity on each /proc/self/task entry) before the cell starts, so the threads
# the feed starts (saturate's loader threads, DataLoader workers and pin thread, DALI's
# threads) inherit the mask. Loader threads / DataLoader workers / DALI num_threads =
# max(1, N - --spare-cores); the training thread has the spare core(s) (default 1).
# torch.set_num_threads(N). The synthetic ceiling runs once per model, on all the cores.
# --isolate picks how cells share a child: model (one child per model: one torch import and
# one cuDNN autotuning per model; the child is re-pinned between cells), cores (one per
# model and core count, pinned at its start) or cell (a fresh child per cell).

MATRIX_FEEDS = ("saturate", "dataloader", "dataloader-gpu", "dali", "saturate-host")
DECODES = ("cpu", "gpu", "auto")
# What fits ~150 s on an H100 with 16 cores (2 children, 8 cells + 2 ceilings at ~7 s each);
# DALI cells cost nothing when nvidia.dali is not installed, and shrink the others when it is.
DEFAULT_MATRIX = ("resnet50:2,4:saturate:cpu,gpu; resnet50:2:dataloader,dali; "
                  "resnet18:8:saturate:cpu,gpu; resnet18:8:dataloader,dali")
CHILD_OVERHEAD_S = 12.0  # python + torch import, CUDA context, first cuDNN autotuning
CELL_OVERHEAD_S = 5.0    # model build, loader start, warmup steps, teardown
GOALS = (("resnet50", 2), ("resnet18", 8))  # >= 0.95 of the ceiling from these cores


def cell_key(c: Result) -> str:
    cores = "all" if c["feed"] == "synthetic" else f"{c['cores']}c"
    return f"{c['model']} {cores} {c['feed']}" + (f" {c['decode']}" if c["decode"] != "-" else "")


def feed_decode(feed: str, decode: str) -> str:
    """The decode column: saturate's own choice, fixed for the others."""
    if feed in ("saturate", "saturate-host"):
        return decode
    return {"dataloader": "cpu", "dataloader-gpu": "cpu", "dali": "mixed"}.get(feed, "-")


def parse_matrix(spec: str) -> list[Result]:
    """'MODELS:CORES:FEEDS[:DECODES]; ...' -> cells (product within a group, union across)."""
    if spec.strip() == "default":
        spec = DEFAULT_MATRIX
    cells: list[Result] = []
    seen: set[str] = set()
    for group in spec.split(";"):
        group = group.strip()
        if not group:
            continue
        parts = [p.strip() for p in group.split(":")]
        if len(parts) not in (3, 4):
            raise ValueError(f"{group!r}: use MODELS:CORES:FEEDS[:DECODES]")
        split = lambda t: [v.strip() for v in t.split(",") if v.strip()]  # noqa: E731
        models, feeds = split(parts[0]), split(parts[2])
        cores = [int(v) for v in split(parts[1])]
        decodes = split(parts[3]) if len(parts) == 4 else ["cpu"]
        for v in feeds:
            if v not in MATRIX_FEEDS:
                raise ValueError(f"{group!r}: feed {v!r} (use {', '.join(MATRIX_FEEDS)})")
        for v in decodes:
            if v not in DECODES:
                raise ValueError(f"{group!r}: decode {v!r} (use {', '.join(DECODES)})")
        for m in models:
            if not callable(getattr(torchvision.models, m, None)):
                raise ValueError(f"{group!r}: no torchvision.models.{m}")
        if any(n < 1 for n in cores):
            raise ValueError(f"{group!r}: cores must be >= 1")
        for m in models:
            for n in cores:
                for f in feeds:
                    for d in (decodes if f in ("saturate", "saturate-host") else ["cpu"]):
                        c = {"model": m, "cores": n, "feed": f, "decode": feed_decode(f, d)}
                        if cell_key(c) not in seen:
                            seen.add(cell_key(c))
                            cells.append(c)
    if not cells:
        raise ValueError("an empty matrix")
    return cells


def loader_takes_decode() -> bool:
    import inspect
    try:
        params = inspect.signature(saturate.Loader.__init__).parameters
    except (TypeError, ValueError):
        return True  # cannot tell: let the call say
    return "decode" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def precheck(c: Result, args: argparse.Namespace, ncpu: int, cuda: bool,
             dali_why: str) -> str:
    """Why a cell cannot run here ('' when it can), found without starting a child."""
    f = c["feed"]
    if f == "synthetic":
        return ""
    if c["cores"] > ncpu:
        return f"only {ncpu} cores in this process's affinity"
    if f in ("saturate", "saturate-host"):
        if saturate is None:
            return f"saturate is not importable: {SATURATE_IMPORT_ERROR}"
        if not args.dataset:
            return "no --dataset"
        if f == "saturate" and not cuda and not args.smoke:
            return "needs CUDA (torch.cuda.is_available() is False)"
        if c["decode"] == "gpu" and not cuda:
            return "decode='gpu' needs CUDA"
        if c["decode"] != "cpu" and not loader_takes_decode():
            return ("this saturate.Loader takes no decode= (TypeError: an unexpected keyword "
                    "argument 'decode')")
        return ""
    if not args.images_root:
        return "no --images-root"
    if f == "dali" and dali_why:
        return dali_why
    return ""


def group_cells(cells: list[Result], isolate: str) -> list[list[Result]]:
    """The children to start, each with its cells in order (ceiling first, cores ascending)."""
    order = sorted(cells, key=lambda c: (c["feed"] != "synthetic", c["cores"] or 0))
    groups: dict[tuple, list[Result]] = {}
    for c in order:
        if isolate == "model":
            k: tuple = (c["model"],)
        elif isolate == "cores":
            k = (c["model"], c["feed"] == "synthetic", c["cores"])
        else:
            k = (cell_key(c),)
        groups.setdefault(k, []).append(c)
    models = list(dict.fromkeys(c["model"] for c in cells))
    return sorted(groups.values(), key=lambda g: models.index(g[0]["model"]))


def plan_cell_seconds(args: argparse.Namespace, n_children: int, n_cells: int) -> float:
    seconds = args.seconds
    if args.budget and n_cells:
        fit = (args.budget - 5 - n_children * CHILD_OVERHEAD_S
               - n_cells * CELL_OVERHEAD_S) / n_cells
        seconds = max(args.min_seconds, min(seconds, fit))
    return seconds


def pin_process(cpus: list[int]) -> list[int]:
    """Every thread of this process onto ``cpus`` (threads started later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (OSError, ValueError):
            pass  # a thread that has just exited
    torch.set_num_threads(len(cpus))
    return sorted(os.sched_getaffinity(0))


def cpu_ranges(cpus: list[int]) -> str:
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(f"{start}" if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def cpu_topology(cpus: list[int]) -> Result:
    """Which of the cores a cell gets are hyperthread siblings (a 2-core cell on one physical
    core has half the decode throughput of one on two)."""
    info: Result = {}
    for c in cpus[:32]:
        base = f"/sys/devices/system/cpu/cpu{c}/topology"
        try:
            with open(f"{base}/thread_siblings_list") as f:
                info[str(c)] = f.read().strip()
        except OSError:
            pass
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f
                          if ln.startswith("model name")), None)
    except OSError:
        model = None
    return {"cpu_model": model, "thread_siblings": info}


def classify_failure(e: BaseException) -> tuple[str, str]:
    """('unavailable' | 'error', reason)."""
    text = f"{type(e).__name__}: {e}"
    errors = getattr(saturate, "errors", None) if saturate is not None else None
    soft = tuple(getattr(errors, n) for n in ("UnavailableError", "UnimplementedError")
                 if errors is not None and hasattr(errors, n))
    if soft and isinstance(e, soft):
        return "unavailable", text
    if isinstance(e, TypeError) and ("decode" in str(e)
                                     or "incompatible function arguments" in str(e)):
        return "unavailable", text  # a saturate without decode= (or a stale _core build)
    return "error", text


def run_cell(c: Result, args: argparse.Namespace, num_classes: int, dev: torch.device,
             cpus: list[int], seconds: float) -> Result:
    a = argparse.Namespace(**vars(args))
    a.arch, a.matrix_mode, a.cell_cpus = c["model"], True, cpus
    n = len(cpus)
    threads = max(1, n - args.spare_cores)
    a.threads, a.workers, a.loader_threads = threads, [threads], threads
    a.decode = c["decode"] if c["feed"] in ("saturate", "saturate-host") else "cpu"
    name = c["feed"]
    if name == "saturate" and dev.type != "cuda":
        name = "saturate-host"  # --smoke on a CPU: the same loader, delivered in host memory
    r = run_feed(name, a, num_classes, dev, seconds, seconds)
    r.pop("sweep", None)
    r["ran_as"] = r.pop("feed")
    r["loader_threads"] = None if c["feed"] == "synthetic" else threads
    return r


def child_main(spec_path: str) -> int:
    """One child of the matrix: its cells in order, one JSON line each into the results file."""
    with open(spec_path) as f:
        spec = json.load(f)
    args = argparse.Namespace(**spec["args"])
    deadline, seconds = spec["deadline"], spec["seconds"]
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if cuda:
        torch.backends.cudnn.benchmark = True
    all_cpus = sorted(os.sched_getaffinity(0))
    out = open(spec["results"], "a")

    def emit(rec: Result) -> None:
        out.write(json.dumps(rec) + "\n")
        out.flush()

    emit({"machine": machine_info(dev)})
    failed = False
    for c in spec["cells"]:
        rec: Result = dict(c)
        left = deadline - time.time()
        if left < min(seconds, args.min_seconds) + CELL_OVERHEAD_S:
            rec.update(status="skipped", reason=f"--budget spent ({left:.0f} s left)")
            log(f"== {cell_key(c)}: skipped, --budget spent")
            emit(rec)
            continue
        cell_seconds = min(seconds, max(1.0, left - CELL_OVERHEAD_S))
        cpus = all_cpus if c["feed"] == "synthetic" else all_cpus[:c["cores"]]
        got = pin_process(cpus)
        log(f"== {cell_key(c)}: cores {cpu_ranges(got)}, {cell_seconds:.1f} s")
        try:
            r = run_cell(c, args, spec["num_classes"], dev, got, cell_seconds)
            rec.update(status="ok", affinity=cpu_ranges(got), **r)
        except Exception as e:  # noqa: BLE001 - one cell's failure is a row, not the end
            kind, why = classify_failure(e)
            failed |= kind == "error"
            if kind == "error":
                traceback.print_exc()
            log(f"   {kind}: {why}")
            rec.update(status=kind, reason=why, affinity=cpu_ranges(got))
            if kind == "error":
                rec["traceback"] = traceback.format_exc()
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
        emit(rec)
    out.close()
    return 1 if failed else 0


def summarize_matrix(res: Result) -> None:
    ceilings = {c["model"]: c["images_per_s"] for c in res["cells"]
                if c["feed"] == "synthetic" and c.get("status") == "ok"}
    for c in res["cells"]:
        if c.get("status") == "ok" and ceilings.get(c["model"]):
            c["fraction_of_ceiling"] = round(c["images_per_s"] / ceilings[c["model"]], 4)
    res["ceilings"] = ceilings
    ok = [c for c in res["cells"] if c.get("status") == "ok"]

    def best_saturate(model: str, cores: int) -> Optional[Result]:
        rows = [c for c in ok if c["model"] == model and c["cores"] == cores
                and c["feed"] == "saturate" and "fraction_of_ceiling" in c]
        return max(rows, key=lambda c: c["images_per_s"]) if rows else None

    goals: list[Result] = []
    for model, cores in GOALS:
        goal = f"{model} fed by saturate from {cores} cores >= 0.95 of the ceiling"
        b = best_saturate(model, cores)
        if b is None:
            goals.append({"goal": goal, "measured": None,
                          "verdict": "n/a (no saturate cell measured for it)"})
            continue
        per = {c["decode"]: c["fraction_of_ceiling"] for c in ok
               if c["model"] == model and c["cores"] == cores and c["feed"] == "saturate"
               and "fraction_of_ceiling" in c}
        f = b["fraction_of_ceiling"]
        goals.append({"goal": goal, "measured": f, "best_decode": b["decode"],
                      "by_decode": per, "verdict": "met" if f >= 0.95 else "NOT met"})
    pairs = sorted({(c["model"], c["cores"]) for c in res["cells"] if c["feed"] == "dali"})
    dali_rows = []
    for model, cores in pairs:
        d = next((c for c in ok if c["model"] == model and c["cores"] == cores
                  and c["feed"] == "dali"), None)
        b = best_saturate(model, cores)
        if d is None:
            why = next((c.get("reason", c.get("status")) for c in res["cells"]
                        if c["model"] == model and c["cores"] == cores and c["feed"] == "dali"),
                       "not run")
            dali_rows.append({"model": model, "cores": cores, "verdict": f"n/a: DALI {why}"})
        elif b is None:
            dali_rows.append({"model": model, "cores": cores,
                              "verdict": "n/a: no saturate cell measured"})
        else:
            x = b["images_per_s"] / d["images_per_s"]
            dali_rows.append({"model": model, "cores": cores, "saturate": b["images_per_s"],
                              "saturate_decode": b["decode"], "dali": d["images_per_s"],
                              "ratio": round(x, 3),
                              "verdict": "met" if x > 1.0 else "NOT met"})
    if dali_rows:
        ok_rows = [r for r in dali_rows if "ratio" in r]
        verdict = ("n/a" if not ok_rows else
                   "met" if all(r["verdict"] == "met" for r in ok_rows) else "NOT met")
        goals.append({"goal": "saturate ahead of DALI's GPU pipeline at equal cores",
                      "by_cores": dali_rows, "verdict": verdict})
    if not res["machine"].get("gpu"):
        for g in goals:
            g["verdict"] += " (no GPU: a code-path check, not a measurement)"
    res["goals"] = goals


def report_matrix(res: Result) -> None:
    s, m = res["settings"], res["machine"]
    print()
    print(f"batch {s['batch']}, {s['size']} px, AMP {s['amp']}, channels_last, "
          f"{s['seconds']:.1f} s per cell, on {m.get('gpu', 'CPU')} "
          f"({m.get('cores')} cores); loader threads = cores - {s['spare_cores']}; "
          f"host CPU % = busy share of the cell's own cores")
    hdr = (f"{'model':<9} {'cores':>5} {'feed':<14} {'decode':<6} {'images/s':>9} "
           f"{'/ceiling':>8} {'GPU busy %':>10} {'data wait %':>11} {'host CPU %':>10} "
           f"{'steps':>5}  setting")
    print(hdr)
    print("-" * len(hdr))
    for c in res["cells"]:
        cores = "all" if c["feed"] == "synthetic" else str(c["cores"])
        lead = f"{c['model']:<9} {cores:>5} {c['feed']:<14} {c['decode']:<6}"
        if c.get("status") != "ok":
            print(f"{lead} {c.get('status', 'not run')}: {c.get('reason', '')}")
            continue
        frac = c.get("fraction_of_ceiling")
        print(f"{lead} {c['images_per_s']:>9.1f} {('n/a' if frac is None else f'{frac:.3f}'):>8} "
              f"{pct(c.get('gpu_busy_pct')):>10} {pct(c.get('data_wait_pct')):>11} "
              f"{pct(c.get('host_cpu_pct')):>10} {c.get('steps', 0):>5}  {c.get('setting', '')}")
    for g in res["goals"]:
        if "by_cores" in g:
            print(f"goal: {g['goal']}: {g['verdict']}")
            for r in g["by_cores"]:
                detail = (f"saturate ({r['saturate_decode']}) {r['saturate']:.1f} vs DALI "
                          f"{r['dali']:.1f} images/s = {r['ratio']:.3f}x -> " if "ratio" in r
                          else "")
                print(f"      {r['model']} from {r['cores']} cores: {detail}{r['verdict']}")
        else:
            by = ", ".join(f"{k} {v:.3f}" for k, v in g.get("by_decode", {}).items())
            print(f"goal: {g['goal']}: measured {g['measured']}"
                  + (f" (decode {by})" if by else "") + f" -> {g['verdict']}")


def run_child(base: str, spec: Result, label: str, res: Result,
              deadline: Optional[float]) -> tuple[dict[str, Result], Any, bool]:
    """Runs one child on spec["cells"]: ({cell key: record}, exit status, killed?)."""
    spec = dict(spec, results=f"{base}.jsonl")
    with open(f"{base}.json", "w") as f:
        json.dump(spec, f)
    log(f"-- child {label}: {', '.join(cell_key(c) for c in spec['cells'])}")
    timeout = max(5.0, deadline - time.time() + 10) if deadline else None
    killed = False
    try:
        rc: Any = subprocess.run([sys.executable, os.path.abspath(__file__),
                                  "--child-spec", f"{base}.json"], timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc, killed = "killed 10 s past the --budget deadline", True
    got: dict[str, Result] = {}
    if os.path.exists(spec["results"]):
        with open(spec["results"]) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a last line cut short
                if "machine" in rec:
                    res["machine"].update(rec["machine"])
                else:
                    got[cell_key(rec)] = rec
    if isinstance(rc, int):
        rc = f"exit {rc}" + (f", signal {-rc}" if rc < 0 else "")
    return got, rc, killed


def main_matrix(args: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    t_start = T_START
    try:
        if args.matrix:
            cells = parse_matrix(args.matrix)
        else:
            models = args.model or ("resnet18" if args.smoke else "resnet50")
            cores = args.cores or str(len(os.sched_getaffinity(0)))
            feeds = args.feeds if args.feeds_given else "saturate"
            cells = parse_matrix(f"{models}:{cores}:{feeds}:{args.decode or 'cpu'}")
    except ValueError as e:
        ap.error(f"--matrix: {e}")
    cuda = torch.cuda.is_available()
    ncpu = len(os.sched_getaffinity(0))
    dali_why = dali_available() if any(c["feed"] == "dali" for c in cells) else ""
    models = list(dict.fromkeys(c["model"] for c in cells))
    ceilings = [{"model": m, "cores": ncpu, "feed": "synthetic", "decode": "-"} for m in models]
    all_cells = [c for m in models for c in ceilings + cells if c["model"] == m]
    runnable = []
    for c in all_cells:
        why = precheck(c, args, ncpu, cuda, dali_why)
        if why:
            c.update(status="unavailable", reason=why)
        else:
            runnable.append(c)
    groups = group_cells(runnable, args.isolate)
    seconds = plan_cell_seconds(args, len(groups), len(runnable))
    num_classes = count_classes(args)
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "feeds_given")}
    settings.update(seconds=seconds, num_classes=num_classes, children=len(groups),
                    cells_runnable=len(runnable), amp=args.amp if cuda else "off (CPU)")
    res: Result = {"mode": "matrix", "date_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                               time.gmtime()),
                   "machine": {"cores": ncpu, **cpu_topology(sorted(os.sched_getaffinity(0)))},
                   "settings": settings, "cells": all_cells, "ceilings": {}, "goals": []}
    log(f"matrix: {len(all_cells)} cells ({len(runnable)} to run, "
        f"{len(all_cells) - len(runnable)} unavailable here) in {len(groups)} child "
        f"process(es) (--isolate {args.isolate}); {seconds:.1f} s per cell"
        + (f" or {args.steps} steps" if args.steps < 10**9 else "")
        + (f"; --budget {args.budget:.0f} s" if args.budget else ""))
    for c in all_cells:
        if c.get("status") == "unavailable":
            log(f"   {cell_key(c)}: unavailable: {c['reason']}")
    if args.plan_only:
        for i, g in enumerate(groups):
            log(f"-- child {i + 1}/{len(groups)}: {', '.join(cell_key(c) for c in g)}")
        return 0
    deadline = t_start + args.budget - 2 if args.budget else float("inf")
    failed = False
    child_args = {k: v for k, v in vars(args).items() if k != "json"}
    with tempfile.TemporaryDirectory(prefix="gpu-train-matrix-") as tmp:
        runs = 0
        for i, g in enumerate(groups):
            pending = list(g)
            while pending:  # a child that dies (a crash in a cell) is restarted after it
                if args.budget and deadline - time.time() < (CHILD_OVERHEAD_S + CELL_OVERHEAD_S
                                                             + args.min_seconds):
                    for c in pending:
                        c.update(status="skipped",
                                 reason="--budget spent before its child started")
                    log(f"-- child {i + 1}/{len(groups)}: skipped, --budget spent")
                    break
                runs += 1
                got, rc, killed = run_child(
                    os.path.join(tmp, f"child-{runs}"),
                    {"args": child_args, "cells": pending, "seconds": seconds,
                     "deadline": deadline if args.budget else time.time() + 10**7,
                     "num_classes": num_classes},
                    f"{i + 1}/{len(groups)}", res, deadline if args.budget else None)
                missing = [c for c in pending if cell_key(c) not in got]
                for c in pending:
                    if cell_key(c) in got:
                        rec = got[cell_key(c)]
                        c.clear()
                        c.update(rec)
                        failed |= c.get("status") == "error"
                pending = []
                if missing:  # the first one is the cell the child was in when it ended
                    failed = True
                    missing[0].update(status="error", reason=f"the child ended in this cell "
                                                             f"({rc})")
                    if killed:
                        for c in missing[1:]:
                            c.update(status="skipped", reason=f"--budget (the child was {rc})")
                    else:
                        pending = missing[1:]
                summarize_matrix(res)
                if args.json:
                    write_json(res, args.json)
    res["settings"]["wall_s"] = round(time.time() - t_start, 1)
    summarize_matrix(res)
    if args.json:
        write_json(res, args.json)
    report_matrix(res)
    log(f"matrix: {res['settings']['wall_s']:.0f} s in all")
    if args.json:
        print(f"results: {args.json}")
    return 1 if failed else 0


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", help="packed saturate dataset (saturate pack folder ...)")
    ap.add_argument("--images-root", help="the same images as an ImageFolder (ROOT/<class>/*.jpg)")
    ap.add_argument("--feeds", default=None,
                    help=f"comma-separated subset of {','.join(FEEDS)} (default: "
                         f"{','.join(FEEDS[:3])}; with --cores: saturate)")
    ap.add_argument("--arch", default="resnet50", help="torchvision model (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=256, help="default: %(default)s")
    ap.add_argument("--size", type=int, default=224, help="crop size in px (default: %(default)s)")
    ap.add_argument("--amp", choices=("fp16", "bf16"), default="fp16",
                    help="autocast dtype; fp16 uses a GradScaler (default: %(default)s)")
    ap.add_argument("--seconds", type=float, default=None,
                    help="timed seconds per feed (default: 60; per cell with --cores: 8)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed steps per feed (default: 15; with --cores: 6, and at least "
                         "the batches the feed holds ready + 2)")
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
    mx = ap.add_argument_group(
        "the matrix: models x host cores x feeds x decode (issue 25), each cell in a child "
        "process pinned to the first N cores; on when any of these is given")
    mx.add_argument("--model", help="models, e.g. resnet50,resnet18 (default: resnet50)")
    mx.add_argument("--cores", help="host core counts, e.g. 2,4,8,16 (default: all)")
    mx.add_argument("--decode", help=f"saturate's decode, a subset of {','.join(DECODES)} "
                                     "(default: cpu; decode= is passed only when not cpu)")
    mx.add_argument("--matrix", metavar="SPEC",
                    help="cells as 'MODELS:CORES:FEEDS[:DECODES]; ...' (the product within a "
                         "group, the union across), or 'default' = " + DEFAULT_MATRIX
                         + "; the synthetic ceiling of each model is added (all cores)")
    mx.add_argument("--isolate", choices=("model", "cores", "cell"), default="model",
                    help="child processes: one per model (re-pinned between cells), per "
                         "(model, cores), or per cell (default: %(default)s)")
    mx.add_argument("--spare-cores", type=int, default=1,
                    help="cores of a cell left to the training thread: loader threads, "
                         "DataLoader workers, DALI threads = max(1, N - this) "
                         "(default: %(default)s)")
    mx.add_argument("--min-seconds", type=float, default=4.0,
                    help="--budget never shrinks a cell below this (default: %(default)s)")
    mx.add_argument("--dali-fused", action="store_true",
                    help="DALI: decoders.image_random_crop + resize (its ResNet-50 example) "
                         "instead of decoders.image + random_resized_crop")
    mx.add_argument("--plan-only", action="store_true",
                    help="print the cells, children and seconds per cell, run nothing")
    ap.add_argument("--child-spec", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true",
                    help="a code-path check: resnet18, 64 px, batch 8, 1 warmup + 3 steps per "
                         "feed, num_workers 2; runs on the CPU without CUDA")
    args = ap.parse_args(argv)
    if args.child_spec:
        return child_main(args.child_spec)
    matrix = any(v is not None for v in (args.model, args.cores, args.decode, args.matrix))
    args.feeds_given = args.feeds is not None
    if args.feeds is None:
        args.feeds = ",".join(FEEDS[:3])
    if args.seconds is None:
        args.seconds = 8.0 if matrix else 60.0
    if args.warmup is None:
        args.warmup = 4 if matrix else 15

    if args.smoke:
        args.arch, args.size, args.batch, args.warmup, args.steps = "resnet18", 64, 8, 1, 3
    if args.workers is None:
        args.workers = "2" if args.smoke else "8,12,16"
    args.workers = [int(w) for w in str(args.workers).split(",") if w.strip()]
    if args.threads != "auto":
        args.threads = int(args.threads)
    if matrix:
        if args.smoke:
            args.min_seconds = min(args.min_seconds, 1.0)
        return main_matrix(args, ap)
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
        elif f in (*DATALOADERS, "dali") and not args.images_root:
            skipped[f] = "no --images-root"
        elif f == "dali" and dali_available():
            skipped[f] = dali_available()
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
