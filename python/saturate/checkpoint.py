"""saturate.Checkpointer: crash-safe asynchronous checkpoints (docs/checkpoint.md).

Swapping ``torch.save`` / ``torch.load``::

    ckpt = saturate.Checkpointer("ckpt", keep=3)
    state = saturate.Checkpointer.load("ckpt")          # newest that verifies, or None
    if state is not None:
        model.load_state_dict(state["model"]); opt.load_state_dict(state["optim"])
        loader.load_state_dict(state["loader"]); start = state["step"] + 1
    for step in range(start, steps):
        ...
        if step % 500 == 0:
            ckpt.save({"model": model.state_dict(), "optim": opt.state_dict(),
                       "loader": loader.state_dict(), "step": step,
                       "rng": torch.get_rng_state()}, step)   # returns after the snapshot
    ckpt.close()                                              # the last write commits

The first ``save`` also allocates the host pool (page faults over the whole
state: several times a later save's cost). ``ckpt.prepare(state)`` before the
loop, or ``Checkpointer(dir, prepare=state)``, pays that ahead.

``save`` blocks only while the tensors are copied into the engine's reusable
host buffers; a C++ thread (which never takes the GIL) writes, fsyncs and
atomically commits ``ckpt/step-N/``. Tensors may be modified as soon as
``save`` returns. Everything that is not a tensor (ints, RNG tuples, the
loader's state_dict, optimizer hyper-parameters) is pickled with tensor
placeholders into one more checksummed file; so, as with ``torch.load``, only
load checkpoints you trust.

Object storage: ``Checkpointer("s3://bucket/prefix")`` uploads each save from
the snapshot buffer (multipart when large; no local staging), manifest last,
through the engine's libcurl client (credentials and endpoint as the AWS CLI
finds them, or ``endpoint=``); ``load("s3://...")`` downloads the newest
checkpoint whose manifest and checksums verify.

Failures: a background write that fails leaves every committed checkpoint as
it was and raises (naming the file) from the next ``save``, ``wait`` or
``close``. Thread-safety: one thread uses a Checkpointer (the training loop).
"""

from __future__ import annotations

import collections
import ctypes
import io
import json
import mmap
import os
import pickle
import queue
import signal
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import re

import numpy as np

from . import _core
from .errors import (CorruptionError, Error, InvalidArgumentError, NotFoundError,
                     UnimplementedError)

__all__ = ["Checkpointer", "CheckpointWarning", "load"]

_TAG = "saturate.tensor"
_REMOTE_STEP_RE = re.compile(r"^step-(0|[1-9][0-9]*)/(.+)$")
_STEP_DIR_RE = re.compile(r"^step-(0|[1-9][0-9]*)$")


def _is_remote(path) -> bool:
    """True for an s3:// location (http(s):// too: the engine then says they are read-only)."""
    return isinstance(path, str) and _core.is_remote_url(path)


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped at load (corrupt, incomplete or interrupted)."""


def _torch():
    """torch when the program imported it (never imported for numpy-only state)."""
    return sys.modules.get("torch")


def _is_torch_tensor(obj) -> bool:
    torch = _torch()
    return (
        torch is not None
        and isinstance(obj, torch.Tensor)
        and obj.layout == torch.strided
        and not obj.is_quantized
        and obj.device.type in ("cpu", "cuda")
    )


def _is_array(obj) -> bool:
    return isinstance(obj, np.ndarray) and not obj.dtype.hasobject


def _tensor_kind(obj) -> Optional[str]:
    """"torch" or "numpy" for what a checkpoint stores as a tensor, else None."""
    if _is_torch_tensor(obj):
        return "torch"
    return "numpy" if _is_array(obj) else None


def _tensor_names(state, prefix: str = "",
                  out: Optional[Dict[int, Tuple[str, str]]] = None) -> Dict[int, Tuple[str, str]]:
    """id(tensor) -> (a path in the structure ("model/fc.weight"), its kind),
    for the manifest; tensors the walk finds need no second type check."""
    out = {} if out is None else out
    if isinstance(state, dict):
        items = state.items()
    elif isinstance(state, (list, tuple)):
        items = enumerate(state)
    else:
        if type(state) not in _PLAIN_TYPES and id(state) not in out:
            kind = _tensor_kind(state)
            if kind is not None:
                out[id(state)] = (prefix or "tensor", kind)
        return out
    for key, value in items:
        _tensor_names(value, f"{prefix}/{key}" if prefix else str(key), out)
    return out


# Exact types that are never tensors or arrays (subclasses take the full check).
_PLAIN_TYPES = frozenset({int, float, bool, str, bytes, type(None), dict, list, tuple,
                          collections.OrderedDict})
_DTYPE_NAMES: Dict[Any, str] = {}  # torch.float32 -> "float32"


def _dtype_name(dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def _is_parameter(obj, torch) -> bool:
    """isinstance(obj, nn.Parameter) without its metaclass' slow check for the
    plain tensors a state_dict holds."""
    if type(obj) is torch.Tensor:
        return bool(getattr(obj, "_is_param", False))
    return isinstance(obj, torch.nn.Parameter)


class _Flattener(pickle.Pickler):
    """Pickles the structure with each tensor replaced by a placeholder; the
    tensors (host buffers ready for the engine) are collected on the side. A
    tensor reachable twice is saved once and comes back as one object."""

    def __init__(self, file, names: Dict[int, Tuple[str, str]]):
        super().__init__(file, protocol=4)
        self.names = names
        self.specs: List[tuple] = []  # (name, ptr, bytes, dtype, shape, device) for the engine
        self.keep: List[Any] = []  # host buffers and sources alive until the engine copied them
        self.cuda: List[Tuple[int, Any]] = []  # (index, contiguous CUDA tensor) to copy D2H
        self.sources: List[Any] = []  # per spec: the contiguous torch tensor copied (None: numpy)
        self._seen: Dict[int, tuple] = {}

    def persistent_id(self, obj):
        if type(obj) in _PLAIN_TYPES:  # most of what a state holds; the checks below cost more
            return None
        pid = self._seen.get(id(obj))
        if pid is not None:
            return pid
        named = self.names.get(id(obj))
        name, kind = named if named is not None else (None, _tensor_kind(obj))
        if kind is None:
            return None
        pid = self._seen[id(obj)] = self._add(obj, kind, name)
        self.keep.append(obj)  # id() stays unique while obj is alive
        return pid

    def _add(self, obj, kind: str, name: Optional[str]) -> tuple:
        index = len(self.specs)
        name = name or f"tensor{index}"
        if kind == "numpy":
            a = np.ascontiguousarray(obj)
            self.keep.append(a)
            self.specs.append((name, a.ctypes.data, a.nbytes, a.dtype.str, list(a.shape), "cpu"))
            self.sources.append(None)
            return (_TAG, index, "numpy", a.dtype, None)
        torch = _torch()
        t = obj.detach()
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        t = t.contiguous()
        nbytes = t.numel() * t.element_size()
        parameter = _is_parameter(obj, torch)
        extra = {"parameter": parameter, "requires_grad": bool(parameter and obj.requires_grad)}
        device = t.device
        if device.type == "cuda":
            self.cuda.append((index, t))
            self.specs.append((name, 0, nbytes, _dtype_name(t.dtype), list(t.shape), str(device)))
        else:
            self.keep.append(t)
            self.specs.append((name, t.data_ptr(), nbytes, _dtype_name(t.dtype), list(t.shape),
                               "cpu"))
        self.sources.append(t)
        return (_TAG, index, "torch", t.dtype, extra)


def _flatten(state) -> Tuple[bytes, _Flattener]:
    buf = io.BytesIO()
    f = _Flattener(buf, _tensor_names(state))
    f.dump({"format": "saturate-checkpoint-state", "version": 1, "state": state})
    return buf.getvalue(), f


# ---- deferred snapshots guarded by the optimizer: save(state, step, guard=opt) ----
#
# The tensors the guard's optimizers own (their params and the tensors of
# optimizer.state) change only in optimizer.step(). save(..., guard=opt)
# therefore copies every other tensor before it returns, as without a guard,
# and leaves the guarded ones to a background thread (CUDA: device->host on
# the side stream, waited for by that thread, not by save). A pre-hook on
# each optimizer's step() waits until the copies of every earlier save are
# done (CPU: the thread's copy; CUDA: the current stream waits for the copy's
# event, the host does not), so step() never changes a tensor before it is in
# the snapshot. The background thread then commits the snapshot to the
# engine, which writes it as any other. CheckFreq's "snapshot ... guarded"
# idea (Mohan et al., FAST '21), for an optimizer instead of a whole step.

_PARALLEL_COPY_BYTES = 16 << 20  # below this one thread copies (as the engine's CopyTensors)


def _storage_key(t) -> Tuple[str, int]:
    """(device type, address of the storage) of a strided tensor: tensors that
    alias (a state_dict()'s detached tensors and the parameters) share it."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except AttributeError:  # torch < 2
        ptr = t.storage().data_ptr()
    return t.device.type, ptr


def _local_tensor(t):
    """A DTensor's local shard (what an FSDP2 optimizer writes), else ``t``."""
    local = getattr(t, "_local_tensor", None)
    torch = _torch()
    return local if torch is not None and isinstance(local, torch.Tensor) else t


def _guard_optimizers(guard) -> List[Any]:
    """The optimizers of ``guard=`` (one, or a list or tuple of them), checked."""
    torch = _torch()
    opts = list(guard) if isinstance(guard, (list, tuple)) else [guard]
    if torch is None or not opts or not all(isinstance(o, torch.optim.Optimizer) for o in opts):
        got = ", ".join(type(o).__name__ for o in opts) or "an empty list"
        raise InvalidArgumentError(
            f"guard must be a torch.optim.Optimizer or a list of them, got {got}")
    if not hasattr(torch.optim.Optimizer, "register_step_pre_hook"):
        raise UnimplementedError(
            f"save(guard=...) needs torch >= 2.0 (Optimizer.register_step_pre_hook); this is "
            f"torch {torch.__version__}. Save without guard= (the whole snapshot is then "
            "copied inside save), or upgrade torch")
    return opts


def _guarded_storages(opts: Sequence[Any]) -> set:
    """Storage keys of every tensor the optimizers write in step(): their
    param_groups' params and the tensors in optimizer.state."""
    torch = _torch()
    keys = set()

    def add(t):
        if isinstance(t, torch.Tensor):
            t = _local_tensor(t)
            if t.layout == torch.strided and t.device.type in ("cpu", "cuda") and t.numel():
                keys.add(_storage_key(t))

    for o in opts:
        for group in o.param_groups:
            for p in group["params"]:
                add(p)
        for st in o.state.values():
            if isinstance(st, dict):
                for v in st.values():
                    add(v)
    return keys


def _is_guarded(t, keys: set) -> bool:
    """``t`` (the contiguous tensor to copy) lives in a guarded storage."""
    return bool(keys) and t.numel() > 0 and _storage_key(t) in keys


def _copy_pieces(pieces: Sequence[Tuple[int, int, int]], threads: int) -> None:
    """memmove of (destination, source, bytes) pieces, cut into ``threads``
    equal shares of bytes (ctypes releases the GIL for each call)."""
    total = sum(n for _, _, n in pieces)
    if threads <= 1 or total < _PARALLEL_COPY_BYTES:
        for dst, src, n in pieces:
            ctypes.memmove(dst, src, n)
        return
    share = -(-total // threads)
    work: List[List[Tuple[int, int, int]]] = [[] for _ in range(threads)]
    w, room = 0, share
    for dst, src, n in pieces:
        while n > 0:
            k = min(n, room)
            work[w].append((dst, src, k))
            dst, src, n, room = dst + k, src + k, n - k, room - k
            if room == 0 and w + 1 < threads:
                w, room = w + 1, share
    errors: List[BaseException] = []

    def run(part):
        try:
            for d, s, k in part:
                ctypes.memmove(d, s, k)
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            errors.append(e)

    helpers = [threading.Thread(target=run, args=(work[i],), daemon=True)
               for i in range(1, threads) if work[i]]
    for h in helpers:
        h.start()
    run(work[0])
    for h in helpers:
        h.join()
    if errors:
        raise errors[0]


class _DeviceStaging:
    """Device->host copies straight into a pool buffer, on a side stream."""

    def __init__(self, core):
        self.core = core  # the engine's Checkpointer, which page-locks its own buffers
        self.stream = None  # made on first use
        self.unpinned_reason: Optional[str] = None  # set when the engine cannot page-lock

    def pin(self, buffer: int, device) -> None:
        """Page-locks a pool buffer, so the copy into it is a real async DMA at
        full speed. The engine registers it once (through its own CUDA
        runtime, which shares the driver's context with torch's) and
        unregisters it before it frees it: a buffer unmapped while still
        registered would leave a stale registration, and later memory at that
        address (another library's staging buffer) would receive copies meant
        for it. Without that (a build without CUDA) the copies still land,
        through pageable memory, and a warning says so once."""
        if self.unpinned_reason is not None:
            return
        index = device.index if device.index is not None else _torch().cuda.current_device()
        try:
            self.core.pin_for_cuda(buffer, index)
        except Error as e:
            self.unpinned_reason = str(e)
            warnings.warn(f"checkpoint buffers are not page-locked, so device->host copies "
                          f"are slower: {e}", CheckpointWarning, stacklevel=4)

    def copy(self, pending, now: Sequence[Tuple[int, Any]], later: Sequence[Tuple[int, Any]]):
        """Enqueues the D2H copies of (index, contiguous CUDA tensor) pairs into
        ``pending``'s buffer: ``now`` first, waited for by the host before this
        returns; ``later`` after them, not waited for. Returns the event that
        marks the ``later`` copies done (None when there are none)."""
        torch = _torch()
        device = (now or later)[0][1].device
        self.pin(pending.buffer, device)
        if any(t.device != device for _, t in (*now, *later)):
            # Tensors on several GPUs (one process driving them all): copied
            # before this returns, as the side stream orders only its own
            # device's work; rare enough not to keep a stream per device.
            _copy_into_pool(pending, sorted([*now, *later], key=lambda p: p[0]),
                            non_blocking=False)
            return None
        if self.stream is None:
            self.stream = torch.cuda.Stream(device=device)
        self.stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(self.stream):
            try:
                done_now = self._enqueue(pending, now, record_sources=False)
            except BaseException:
                self.stream.synchronize()  # no copy may outlive its (unrecorded) source
                raise
            done_later = self._enqueue(pending, later, record_sources=True)
        if done_now is not None:
            done_now.synchronize()
        return done_later

    def _enqueue(self, pending, batch, record_sources: bool):
        """Enqueues ``batch``'s copies on the side stream (current); returns an
        event recorded after them, None for an empty batch. ``record_sources``:
        tell the caching allocator that the stream uses each source, so it
        outlives the copy; without it (copies the host waits for while their
        sources are alive) saves ~5 us per tensor."""
        if not batch:
            return None
        torch = _torch()
        record = (lambda t: t.record_stream(self.stream)) if record_sources else None
        _copy_into_pool(pending, batch, record)
        done = torch.cuda.Event()
        done.record(self.stream)
        return done


# Device->host copies go one per run of tensors that lie next to each other in
# the pool: the run is gathered on the device into one buffer laid out as the
# pool lays it out (a torch.cat of byte views, zeros in the padding), and that
# buffer is copied in one transfer. A copy_ per tensor costs the host tens of
# microseconds on a GPU (dispatch, the page-locked check, the copy's event),
# which made the save of a state of hundreds of small tensors (ResNet-50 with
# momentum: 481) several times longer than the copy of its bytes.
_RUN_BYTES = 64 << 20  # the most device memory one gathered run takes
_ALONE_BYTES = 16 << 20  # a tensor this large is copied by itself, not gathered


def _plan_runs(items: Sequence[Tuple[int, int, int, Any]]) -> List[List[Tuple[int, int, int, Any]]]:
    """Splits (index, pool offset, bytes, device) items, in index order, into
    runs of consecutive indices (so nothing else lies between them in the pool)
    on one device that span at most _RUN_BYTES; an item of _ALONE_BYTES or more
    is a run of its own."""
    runs: List[List[Tuple[int, int, int, Any]]] = []
    for item in items:
        index, offset, nbytes, device = item
        run = runs[-1] if runs else None
        if (run is None or index != run[-1][0] + 1 or device != run[-1][3]
                or nbytes >= _ALONE_BYTES or run[-1][2] >= _ALONE_BYTES
                or offset + nbytes - run[0][1] > _RUN_BYTES):
            runs.append([item])
        else:
            run.append(item)
    return runs


def _byte_view(t):
    return t.reshape(-1).view(_torch().uint8)


def _gather(parts: Sequence[Tuple[int, Any]], pad) -> Any:
    """One 1-D uint8 tensor on the parts' device: each (offset, contiguous
    tensor)'s bytes at its offset from the first one's, ``pad(n)`` (n zero
    bytes) between them."""
    views, at = [], parts[0][0]
    for offset, t in parts:
        if offset > at:
            views.append(pad(offset - at))
        views.append(_byte_view(t))
        at = offset + t.numel() * t.element_size()
    return _torch().cat(views)


def _copy_into_pool(pending, batch: Sequence[Tuple[int, Any]],
                    record: Optional[Callable[[Any], None]] = None,
                    non_blocking: bool = True) -> None:
    """Copies (index, contiguous tensor) pairs, in index order, into
    ``pending``'s buffer at each index's destination, one copy per run
    (for CUDA sources enqueued on the current stream when ``non_blocking``).
    ``record(t)`` is called for every source an enqueued copy reads."""
    torch = _torch()
    base = pending.buffer
    tensors = dict(batch)
    runs = _plan_runs([(i, pending.destination(i) - base, t.numel() * t.element_size(), t.device)
                       for i, t in batch])
    widest = max((b[1] - a[1] - a[2] for run in runs for a, b in zip(run, run[1:])), default=0)
    zeros: Dict[Any, Any] = {}  # per device the widest gap's zero bytes; per (device, n) a slice

    def pad(device, n):
        view = zeros.get((device, n))
        if view is None:
            whole = zeros.get(device)
            if whole is None:
                whole = zeros[device] = torch.zeros(widest, dtype=torch.uint8, device=device)
            view = zeros[(device, n)] = whole[:n]
        return view

    for run in runs:
        first, last = run[0], run[-1]
        span = last[1] + last[2] - first[1]
        if span == 0:  # empty tensors only
            continue
        host = torch.frombuffer((ctypes.c_uint8 * span).from_address(base + first[1]),
                                dtype=torch.uint8)
        if len(run) == 1:
            source = _byte_view(tensors[first[0]])
        else:
            source = _gather([(offset, tensors[i]) for i, offset, _, _ in run],
                             lambda n: pad(first[3], n))
        host.copy_(source, non_blocking=non_blocking)
        if record is not None:
            for item in run:
                record(tensors[item[0]])


def _version(t) -> Optional[int]:
    """The tensor's version counter (bumped by every in-place write to it or to
    a view of it, detach() included), None where there is none."""
    try:
        return t._version
    except (AttributeError, RuntimeError):  # inference-mode tensors have none
        return None


class _Job:
    """One guarded save's copies still to do, then its commit. ``keep``:
    (name, tensor) of the deferred tensors, alive until copied; their version
    counters are read now (at save) and again when the copy is done."""

    __slots__ = ("step", "seq", "pieces", "bytes", "event", "device", "commit", "keep",
                 "versions", "copied", "finished", "wait_ns", "copy_ns")

    def __init__(self, step, seq, pieces, event, device, commit, keep):
        self.step, self.seq, self.pieces, self.event, self.device = step, seq, pieces, event, device
        self.bytes = sum(n for _, _, n in pieces)
        self.commit, self.keep = commit, keep
        self.versions = [_version(t) for _, t in keep]
        self.copied = threading.Event()  # host copies done (the hook's wait)
        self.finished = threading.Event()  # committed, or failed
        self.wait_ns = 0  # training time the hooks waited for this save
        self.copy_ns = 0  # the background copy (host copies and the device event)


def _check_unchanged(job: _Job) -> None:
    """Raises when a deferred tensor was written while its copy ran (its version
    counter moved): the snapshot may mix old and new values, so it is dropped."""
    changed = [name for (name, t), v in zip(job.keep, job.versions)
               if v is not None and _version(t) != v]
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise InvalidArgumentError(
            f"checkpoint step {job.step}: {changed[0]}{more} was modified while its deferred "
            "copy ran, so this save is dropped: between save(guard=opt) and opt.step() only "
            "the optimizer may write the tensors it owns (call wait() before writing them)")


class _Deferred:
    """The background half of guarded saves: a thread that copies each save's
    guarded tensors into its snapshot (oldest first) and commits it, and the
    optimizer hooks that make step() (and load_state_dict()) wait for it.

    Spans (category ``checkpoint``, args step and seq): ``checkpoint_guard_wait``
    on the training thread while a hook waits (doctor counts it as stall, as
    ``checkpoint_save``), ``checkpoint_deferred_copy`` on the copy thread
    (costs the steps nothing, like ``checkpoint_write``).

    Thread-safety: submit/block/wait/close from the training thread; the
    worker only sets each job's events and ``error``."""

    def __init__(self, threads: int, rank: int = -1):
        self.threads = max(1, int(threads))
        self.rank = rank
        self._queue: "queue.Queue[Optional[_Job]]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._open: "collections.deque[_Job]" = collections.deque()  # hooks may still wait
        self._last: Optional[_Job] = None  # the newest submitted (FIFO: done => all done)
        self._hooks: Dict[int, Tuple[Any, List[Any]]] = {}  # id(opt) -> (weakref, handles)
        self.error: Optional[BaseException] = None
        self.total_wait_ns = 0
        self.saves = 0

    # -- training thread --

    def protect(self, opts: Sequence[Any]) -> None:
        """Registers the hooks on each optimizer, once."""
        for o in opts:
            have = self._hooks.get(id(o))
            if have is not None and have[0]() is o:
                continue
            handles = [o.register_step_pre_hook(self._on_step)]
            on_load = getattr(o, "register_load_state_dict_pre_hook", None)  # torch >= 2.3
            if on_load is not None:
                handles.append(on_load(self._on_load))
            self._hooks[id(o)] = (weakref.ref(o), handles)

    def _on_step(self, optimizer, args, kwargs):
        self.block()

    def _on_load(self, optimizer, state_dict):
        self.block()
        return None

    def submit(self, job: _Job) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="saturate-ckpt-guard",
                                            daemon=True)
            self._thread.start()
        self.saves += 1
        self._open.append(job)
        self._last = job
        self._queue.put(job)

    def block(self) -> int:
        """Waits until the copies of every guarded save so far are done (a CUDA
        copy: the current stream waits for it, the host does not). Returns the
        nanoseconds waited, which count to the newest of those saves."""
        jobs = list(self._open)
        if not jobs:
            return 0
        start = time.perf_counter_ns()
        trace_start = _core.trace_now_ns()
        for job in jobs:
            job.copied.wait()
        for job in jobs:
            if job.event is not None:
                _torch().cuda.current_stream(job.device).wait_event(job.event)
        waited = time.perf_counter_ns() - start
        newest = jobs[-1]
        newest.wait_ns += waited
        self.total_wait_ns += waited
        _core.checkpoint_span("checkpoint_guard_wait", trace_start, _core.trace_now_ns(),
                              newest.step, newest.seq, self.rank)
        # Every hook from now on runs after these copies (host) or on a stream
        # ordered after them (device): nothing left to wait for.
        self._open.clear()
        return waited

    def wait(self, timeout_s: Optional[float] = None) -> bool:
        """Until every guarded save is copied and committed to the engine (its
        write then counts in the engine's wait()); True when done."""
        job = self._last
        return job is None or job.finished.wait(timeout_s)

    def raise_error(self) -> None:
        """Raises (once) a failure of the background copy or commit."""
        if self.error is not None:
            e, self.error = self.error, None
            raise e

    def last_stats(self) -> Dict[str, Any]:
        job = self._last
        return {"guard_saves": self.saves,
                "guard_wait_ns": job.wait_ns if job is not None else 0,
                "total_guard_wait_ns": self.total_wait_ns,
                "deferred_bytes": job.bytes if job is not None else 0,
                "deferred_copy_ns": job.copy_ns if job is not None and job.finished.is_set()
                else None}

    def close(self) -> None:
        """Waits for the jobs, stops the thread and removes the hooks."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        for _, handles in self._hooks.values():
            for h in handles:
                h.remove()
        self._hooks.clear()
        self._open.clear()

    # -- the copy thread --

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                if self.error is None:  # after a failure, later saves are dropped (slots freed)
                    start = _core.trace_now_ns()
                    _copy_pieces(job.pieces, self.threads)
                    _check_unchanged(job)  # before the step can run: a change broke the contract
                    job.copied.set()
                    if job.event is not None:
                        job.event.synchronize()
                    end = _core.trace_now_ns()
                    job.copy_ns = end - start
                    _core.checkpoint_span("checkpoint_deferred_copy", start, end, job.step,
                                          job.seq, self.rank)
                    job.commit()
            except BaseException as e:  # noqa: BLE001 - raised by the next save/wait/close
                if self.error is None:
                    self.error = e
            finally:
                job.copied.set()
                job.commit = job.keep = job.pieces = None  # an uncommitted slot goes back
                job.finished.set()


class Checkpointer:
    """Writes checkpoints of a (nested) state to ``dir/step-N/`` in the background.

    Args:
      dir: the checkpoint directory (created if missing).
      keep: committed checkpoints to keep (the newest ``keep``).
      on_busy: what ``save`` does while ``max_in_flight`` saves are still
        writing: ``"wait"`` (block until one commits) or ``"skip"`` (return
        False at once and count it in ``stats()["skipped"]``).
      max_in_flight: snapshots held at once (each costs one host buffer the
        size of the state).
      copy_threads: threads for the snapshot copy (0: up to 4).
      prepare: a state like the ones ``save`` will take: ``prepare(state)``
        is called before the constructor returns.
      endpoint: for s3:// dirs, the S3 endpoint (default: AWS_ENDPOINT_URL_S3,
        AWS_ENDPOINT_URL, else AWS).
      multipart_threshold_bytes, part_bytes: for s3:// dirs, objects larger
        than the threshold are uploaded in parts of part_bytes (>= 5 MiB);
        0: the engine's defaults (64 MiB, 16 MiB).
      handle_sigterm: install a SIGTERM handler (main thread only) that waits
        up to ``grace_s`` for the in-flight save to commit, then calls the
        previous handler, or exits with status 143 (SystemExit(143); when the
        write did not commit in time, os._exit(143), leaving the previous
        checkpoint as the newest).
    """

    def __init__(self, dir: str, keep: int = 3, *, on_busy: str = "wait", max_in_flight: int = 1,
                 copy_threads: int = 0, handle_sigterm: bool = False, grace_s: float = 30.0,
                 prepare: Any = None, endpoint: Optional[str] = None,
                 multipart_threshold_bytes: int = 0, part_bytes: int = 0):
        self.dir = dir.rstrip("/") if _is_remote(dir) else os.fspath(dir)
        self._core = _core.Checkpointer(self.dir, keep, max_in_flight, on_busy, copy_threads,
                                        endpoint=endpoint or "",
                                        multipart_threshold_bytes=int(multipart_threshold_bytes),
                                        part_bytes=int(part_bytes))
        self._max_in_flight = int(max_in_flight)
        self._grace_s = float(grace_s)
        self._staging = _DeviceStaging(self._core)  # CUDA side stream, page-locking the pool
        self._deferred = _Deferred(copy_threads or max(1, min(4, os.cpu_count() or 1)))
        self._seq = 0  # saves taken (the `seq` of guarded saves' spans)
        self._blocking_ns: List[int] = []
        self._prev_sigterm = None
        self._closed = False
        if prepare is not None:
            self.prepare(prepare)
        if handle_sigterm:
            self._install_sigterm()

    # ---- saving ----

    def save(self, state: Any, step: int, *, guard: Any = None) -> bool:
        """Snapshots ``state`` as checkpoint ``step`` and returns once it is
        copied; True when queued, False when skipped (``on_busy="skip"``).

        ``guard``: a torch.optim.Optimizer (or a list of them; torch >= 2.0).
        The tensors it owns (its params and ``optimizer.state``'s tensors,
        matched by storage, so a ``model.state_dict()`` that aliases the params
        counts) are copied after save returns, in the background; everything
        else before, as without a guard. The optimizer's next ``step()`` (and
        ``load_state_dict()``) waits until those copies are done. Contract:
        between ``save(guard=opt)`` and ``opt.step()`` only the optimizer may
        write its tensors (no in-place edits of parameters, no
        ``model.load_state_dict``; ``zero_grad`` and backward are fine)."""
        start = time.perf_counter_ns()
        self._deferred.raise_error()
        opts = None
        if guard is not None:
            opts = _guard_optimizers(guard)
            self._deferred.protect(opts)
        with _core.Phase("checkpoint_save", "checkpoint"):
            blob, f = _flatten(state)
            self._seq += 1
            if opts is not None:
                saved = self._save_guarded(int(step), blob, f, _guarded_storages(opts))
            elif f.cuda:
                saved = self._save_with_device_tensors(int(step), blob, f)
            else:
                saved = self._core.save(int(step), f.specs, blob)
        if saved:
            self._blocking_ns.append(time.perf_counter_ns() - start)
        return saved

    def _save_guarded(self, step: int, blob: bytes, f: _Flattener, keys: set) -> bool:
        """The engine copies the unguarded host tensors now (Begin); guarded
        ones are left to the background thread, which commits the snapshot."""
        later = {i for i, t in enumerate(f.sources) if t is not None and _is_guarded(t, keys)}
        specs = [(spec[0], 0) + tuple(spec[2:]) if i in later else spec
                 for i, spec in enumerate(f.specs)]
        pending = self._core.begin(step, specs)  # copies what is not deferred
        if pending is None:
            return False
        event = device = None
        if f.cuda:
            now = [(i, t) for i, t in f.cuda if i not in later]
            deferred_cuda = [(i, t) for i, t in f.cuda if i in later]
            event = self._staging.copy(pending, now, deferred_cuda)
            device = f.cuda[0][1].device
        pieces = [(pending.destination(i), f.specs[i][1], f.specs[i][2]) for i in sorted(later)
                  if f.sources[i].device.type == "cpu"]
        keep = [(f.specs[i][0], f.sources[i]) for i in sorted(later)]
        self._deferred.submit(_Job(step, self._seq, pieces, event, device,
                                   lambda: self._core.commit(pending, blob), keep))
        return True

    def prepare(self, state: Any) -> None:
        """Allocates and faults in the host pool for saves of ``state`` (or of
        anything no larger), so that the first ``save`` blocks no longer than
        later ones; with CUDA tensors in ``state`` also registers the pool with
        CUDA (page-locked), which the first ``save`` would do otherwise.

        ``state`` is flattened as ``save`` flattens it; only the tensors' sizes
        are used, nothing is copied. Takes about one first save's extra time,
        here instead of inside the loop. Memory: one buffer of the state's size
        per ``max_in_flight`` slot, what the pool holds anyway once that many
        saves overlapped. A later, larger state replaces the buffer (the first
        save of it pays again); call ``prepare`` again when the state grows.
        """
        with _core.Phase("checkpoint_prepare", "checkpoint"):
            _, f = _flatten(state)
            self._core.prepare([spec[2] for spec in f.specs])
            if f.cuda:
                for ptr, _ in self._pool_buffers(f.specs):
                    self._staging.pin(ptr, f.cuda[0][1].device)

    def _pool_buffers(self, specs) -> List[Tuple[int, int]]:
        """(address, bytes) of the pool buffers saves of ``specs`` would use:
        every free slot is taken with nothing copied, then given back."""
        empty = [(spec[0], 0) + tuple(spec[2:]) for spec in specs]  # no data: nothing copied
        pendings = []
        while len(pendings) < self._max_in_flight:
            pending = self._core.begin(0, empty)  # waits while saves write (on_busy="wait")
            if pending is None:  # on_busy="skip" and the other slots are writing
                break
            pendings.append(pending)
        pending = None
        out = [(p.buffer, p.buffer_bytes) for p in pendings]
        pendings.clear()  # abandoned: the slots and buffers go back to the pool
        return out

    def _save_with_device_tensors(self, step: int, blob: bytes, f: _Flattener) -> bool:
        """GPU tensors: device->host on a side stream straight into the pool's
        (pinned) buffer, waited for; host tensors were copied by the engine
        in Begin."""
        pending = self._core.begin(step, f.specs)
        if pending is None:
            return False
        self._staging.copy(pending, f.cuda, [])
        self._core.commit(pending, blob)
        return True

    def wait(self) -> None:
        """Blocks until every save has committed (guarded saves: copied first);
        raises if one failed."""
        self._deferred.wait()
        self._deferred.raise_error()
        self._core.wait()

    def close(self) -> None:
        """wait(), then stops the writer (and the guard's copy thread, removing
        its optimizer hooks). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._restore_sigterm()
        try:
            self._deferred.close()
            self._deferred.raise_error()
        finally:
            self._core.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stats(self) -> Dict[str, Any]:
        """Engine counters (saves, commits, skipped, failed, last_blocking_ns,
        last_write_ns, bytes_written, write_bytes_per_s, pool_bytes, ...) plus
        ``blocking_ns``: the last save's time in Python (flatten + snapshot).

        Guarded saves (``save(guard=...)``) add: ``guard_saves``;
        ``guard_wait_ns``, the time optimizer hooks waited for the last guarded
        save's copies (0 until a step() came); ``total_guard_wait_ns``;
        ``blocked_ns`` = ``blocking_ns`` + ``guard_wait_ns``, what the last
        save cost the training thread; ``deferred_bytes`` and
        ``deferred_copy_ns`` (the background copy, None while it runs). The
        engine's ``last_blocking_ns`` of a guarded save spans Begin to the
        background commit, not the training thread's stall."""
        s = self._core.stats()
        s["blocking_ns"] = self._blocking_ns[-1] if self._blocking_ns else 0
        s.update(self._deferred.last_stats())
        s["blocked_ns"] = s["blocking_ns"] + s["guard_wait_ns"]
        return s

    def advise_interval(self, mtbf_s: float, step_time_s: Optional[float] = None) -> Dict[str, float]:
        """A checkpoint interval from Young's formula sqrt(2 * cost * MTBF),
        with cost the measured mean time ``save`` blocked training. Returns
        blocking_s, interval_s, overhead_pct (blocking per interval) and, given
        ``step_time_s``, interval_steps."""
        if not self._blocking_ns:
            raise RuntimeError("advise_interval needs at least one save() to measure its cost")
        if mtbf_s <= 0:
            raise ValueError(f"mtbf_s must be > 0, got {mtbf_s}")
        blocked_ns = sum(self._blocking_ns) + self._deferred.total_wait_ns  # + guard hook waits
        cost_s = blocked_ns / len(self._blocking_ns) / 1e9
        interval_s = _core.young_interval_s(cost_s, float(mtbf_s))
        out = {"blocking_s": cost_s, "mtbf_s": float(mtbf_s), "interval_s": interval_s,
               "overhead_pct": 100.0 * cost_s / interval_s if interval_s > 0 else 0.0}
        if step_time_s:
            out["interval_steps"] = max(1, round(interval_s / step_time_s))
        return out

    # ---- SIGTERM ----

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("handle_sigterm=True needs the main thread (Python signal rule)")
        self._prev_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _restore_sigterm(self) -> None:
        if self._prev_sigterm is not None and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._prev_sigterm)
        self._prev_sigterm = None

    def _on_sigterm(self, signum, frame) -> None:
        prev = self._prev_sigterm
        deadline = time.monotonic() + self._grace_s
        copied = self._deferred.wait(self._grace_s)  # guarded saves: their copies, then commits
        committed = copied and self._core.wait_for(max(0.0, deadline - time.monotonic()))
        self._restore_sigterm()
        if callable(prev):
            prev(signum, frame)
            return
        if prev == signal.SIG_IGN:
            return
        if not committed:
            os._exit(143)  # the writer would hold up a normal exit; the tmp dir is ignored
        self._closed = True
        self._deferred.close()
        self._core.close()
        raise SystemExit(143)

    # ---- loading ----

    # load(dir, map_location=None, *, mmap=True, info=False): see load() below.

    @staticmethod
    def list(dir: str, *, endpoint: Optional[str] = None) -> List[Tuple[int, str]]:
        """Committed checkpoints (step, path), newest first (not verified); for
        an s3:// ``dir``, the steps whose manifest object exists."""
        if _is_remote(dir):
            url = dir.rstrip("/")
            committed, _ = _remote_steps(_core.ObjectStore(url, endpoint or "").list())
            return [(step, f"{url}/step-{step}") for step in committed]
        return [tuple(x) for x in _core.checkpoint_list(os.fspath(dir))]

    @staticmethod
    def verify(path: str, *, endpoint: Optional[str] = None) -> Dict[str, Any]:
        """Checks one ``step-N`` directory (manifest and every checksum); raises
        saturate.errors.CorruptionError naming the bad file. An s3:// ``step-N``
        is downloaded to check it."""
        if _is_remote(path):
            base, name = path.rstrip("/").rsplit("/", 1)
            m, _ = _fetch_verified(_core.ObjectStore(base, endpoint or ""), name)
            return m
        return _core.checkpoint_verify(os.fspath(path))


def _map_file(path: str, use_mmap: bool, cache: Dict[str, Any]):
    """A writable buffer over the whole file: a private (copy-on-write) map, or its bytes."""
    buf = cache.get(path)
    if buf is None:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                buf = bytearray()
            elif use_mmap:
                buf = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
            else:
                buf = bytearray(size)
                f.readinto(buf)
        cache[path] = buf
    return buf


def _device_for(saved: str, map_location) -> Any:
    torch = _torch()
    if map_location is not None:
        return torch.device(map_location) if torch is not None else map_location
    if saved.startswith("cuda") and torch is not None and torch.cuda.is_available():
        return torch.device(saved)
    return torch.device("cpu") if torch is not None else "cpu"


class _Rebuilder(pickle.Unpickler):
    def __init__(self, file, entries, map_location, use_mmap: bool):
        super().__init__(file)
        self.entries, self.map_location, self.use_mmap = entries, map_location, use_mmap
        self.files: Dict[str, Any] = {}
        self.built: Dict[int, Any] = {}  # a tensor saved once comes back as one object

    def persistent_load(self, pid):
        tag, index, kind, dtype, extra = pid
        if tag != _TAG:
            raise pickle.UnpicklingError(f"unknown persistent id {tag!r}")
        if index not in self.built:
            self.built[index] = self._build(index, kind, dtype, extra)
        return self.built[index]

    def _build(self, index, kind, dtype, extra):
        e = self.entries[index]
        shape = tuple(e["shape"])
        buf = _map_file(e["file"], self.use_mmap, self.files) if e["bytes"] else None
        if kind == "numpy":
            if buf is None:
                return np.empty(shape, dtype)
            return np.frombuffer(buf, np.uint8, e["bytes"], e["offset"]).view(dtype).reshape(shape)
        import torch  # a torch tensor was saved: torch is needed to rebuild it

        if buf is None:
            t = torch.empty(shape, dtype=dtype)
        else:
            t = torch.frombuffer(buf, dtype=torch.uint8, count=e["bytes"], offset=e["offset"])
            t = t.view(dtype).reshape(shape)
        device = _device_for(e["device"], self.map_location)
        if t.device != device:
            t = t.to(device)
        if extra and extra.get("parameter"):
            t = torch.nn.Parameter(t, requires_grad=extra.get("requires_grad", False))
        return t


def _fetch_verified(store, prefix: str, names=None) -> Tuple[Dict[str, Any], Dict[str, bytearray]]:
    """Downloads the single-process checkpoint ``prefix`` (``step-N`` or
    ``rank-R/step-N``) of an ObjectStore and checks it as Verify does locally:
    the manifest's own checksum, then every file's size and XXH3-64 (each
    file fetched with parallel ranged GETs into one buffer). Returns
    (manifest, {file name: buffer}); CorruptionError names the object.
    ``names``: only these files (the others are not fetched or checked)."""
    key = f"{prefix}/manifest.json"
    try:
        text = store.get(key)
    except NotFoundError:
        raise CorruptionError(f"{store.describe(key)}: missing (incomplete checkpoint)") from None
    m = _core.checkpoint_parse_manifest(text, store.describe(key))
    m["manifest_xxh3"] = _json_xxh3(text)
    buffers: Dict[str, bytearray] = {}
    for f in m["files"]:
        if names is not None and f["name"] not in names:
            continue
        obj = f"{prefix}/{f['name']}"
        buf = bytearray(f["bytes"])
        view = np.frombuffer(buf, np.uint8) if f["bytes"] else np.empty(0, np.uint8)
        try:
            if f["bytes"]:
                store.get_into(obj, 0, view)
        except NotFoundError:
            raise CorruptionError(f"{store.describe(obj)}: missing (incomplete checkpoint)") \
                from None
        got = _core.xxh3_hex(view)
        if got != f["xxh3"]:
            raise CorruptionError(f"{store.describe(obj)}: checksum mismatch (xxh3 {got}, "
                                  f"manifest says {f['xxh3']})")
        buffers[f["name"]] = buf
    return m, buffers


def _json_xxh3(text: bytes) -> Optional[str]:
    try:
        return json.loads(text).get("xxh3")
    except ValueError:
        return None


def _remote_steps(names: List[str]) -> Tuple[List[int], List[int]]:
    """(committed steps newest first, steps with objects but no manifest) from object names."""
    files: Dict[int, set] = {}
    for n in names:
        m = _REMOTE_STEP_RE.match(n)
        if m:
            files.setdefault(int(m.group(1)), set()).add(m.group(2))
    committed = sorted((s for s, f in files.items() if "manifest.json" in f), reverse=True)
    partial = sorted(s for s, f in files.items() if "manifest.json" not in f)
    return committed, partial


def _state_from(m: Dict[str, Any], buffers: Dict[str, bytearray], url: str, map_location,
                info: bool):
    """The state of a downloaded, verified checkpoint (tensors are views of ``buffers``)."""
    rebuilder = _Rebuilder(io.BytesIO(bytes(buffers[m["metadata_file"]])), m["tensors"],
                           map_location, False)
    rebuilder.files = buffers  # _map_file finds each file's buffer by name
    state = rebuilder.load()["state"]
    if info:
        return state, {"step": m["step"], "path": url, "created_unix_ms": m["created_unix_ms"]}
    return state


def _load_remote(url: str, map_location, info: bool, endpoint: Optional[str]):
    url = url.rstrip("/")
    base, name = url.rsplit("/", 1)
    if _STEP_DIR_RE.match(name):  # one checkpoint: that one, verified
        m, buffers = _fetch_verified(_core.ObjectStore(base, endpoint or ""), name)
        return _state_from(m, buffers, url, map_location, info)
    store = _core.ObjectStore(url, endpoint or "")
    committed, partial = _remote_steps(store.list())
    for step in partial:
        warnings.warn(f"saturate checkpoint: {url}/step-{step}: incomplete (a save was "
                      "interrupted before its manifest was written); ignored",
                      CheckpointWarning, stacklevel=3)
    reasons = []
    for step in committed:
        try:
            m, buffers = _fetch_verified(store, f"step-{step}")
        except (CorruptionError, NotFoundError) as e:
            reasons.append(f"{url}/step-{step}: skipped: {e}")
            warnings.warn(f"saturate checkpoint: {reasons[-1]}", CheckpointWarning, stacklevel=3)
            continue
        return _state_from(m, buffers, f"{url}/step-{step}", map_location, info)
    if committed:
        raise CorruptionError(f"no checkpoint in {url} verifies:\n  " + "\n  ".join(reasons))
    return (None, None) if info else None


def load(dir: str, map_location: Any = None, *, mmap: bool = True, info: bool = False,
         endpoint: Optional[str] = None):
    """The state of the newest checkpoint in ``dir`` whose manifest and
    checksums verify, or None when ``dir`` is missing or holds no committed
    checkpoint (a fresh start).

    Checkpoints skipped on the way (corrupt, incomplete, interrupted) are
    named in a :class:`CheckpointWarning`. Tensors go to ``map_location``
    (a device; None: where they were saved, CPU when that device is absent).
    With ``mmap`` (default) CPU tensors are private copy-on-write maps of the
    files: nothing is read until used, and writes never reach the files.
    With ``info=True`` returns (state, {"step", "path", "created_unix_ms"}).
    Raises CorruptionError when checkpoints exist and none verifies.

    ``dir`` may also be one committed checkpoint (a ``step-N`` directory or
    s3:// prefix, with its manifest.json): that one is verified and loaded,
    or CorruptionError names what does not verify.

    An s3:// ``dir`` (``endpoint``: as the constructor's) is listed, and the
    newest committed checkpoint is downloaded and checked (every file's size
    and XXH3-64) before it is used; tensors are then views of the downloaded
    buffers (``mmap`` does not apply).
    """
    if _is_remote(dir):
        return _load_remote(dir, map_location, info, endpoint)
    if not os.path.exists(dir):
        return (None, None) if info else None  # a first run, before any save
    if _STEP_DIR_RE.match(os.path.basename(os.path.normpath(dir))) or \
            os.path.exists(os.path.join(dir, "manifest.json")):
        r = _core.checkpoint_verify(os.fspath(dir))  # one checkpoint, not a directory of them
    else:
        r = _core.checkpoint_load_newest(os.fspath(dir))
        for w in r["warnings"]:
            warnings.warn(f"saturate checkpoint: {w}", CheckpointWarning, stacklevel=2)
        if not r["found"]:
            return (None, None) if info else None
    with open(r["metadata_file"], "rb") as f:
        wrapper = _Rebuilder(f, r["tensors"], map_location, mmap).load()
    state = wrapper["state"]
    if info:
        return state, {"step": r["step"], "path": r["path"], "created_unix_ms": r["created_unix_ms"]}
    return state


def _load_reference(fields: Dict[str, Any]):
    """What ``torch.load`` of a ``.ckpt`` written by ``saturate.lightning.SaturateCheckpointIO``
    returns: the checkpoint it names, verified (tensors where they were saved, CPU when that
    device is absent). The unpickler calls it, so only with ``weights_only=False``. It gets
    the reference's fields, not the file's place: it follows the absolute path recorded at
    save time (the plugin's own load finds a moved directory's data beside the .ckpt)."""
    target = fields["checkpoint_path"]
    if not os.path.isdir(target):
        raise CorruptionError(
            f"this .ckpt names the saturate checkpoint {target}, which is missing; if the "
            "directory was moved, load it with "
            "saturate.lightning.SaturateCheckpointIO().load_checkpoint(path)")
    return load(target)


Checkpointer.load = staticmethod(load)
