"""saturate_autotrace: what an unmodified PyTorch job spends its steps on.

Imported before user code by the sitecustomize that ``saturate watch``,
``doctor``, ``tune`` and ``run-instrumented`` put first on PYTHONPATH, or by
``import saturate.auto``. It uses the standard library only, so it loads in
whatever interpreter the job runs (a venv without saturate, another Python
version). It never imports torch itself: it hooks torch when, and if, the job
imports it, and records into ``$SATURATE_RUN_DIR/spans-<pid>-auto.jsonl`` in
the spans format of docs/trace.md (what each event means: docs/auto.md):

    step marks   the end of every optimizer update (Optimizer.step; GradScaler.step
                 also when it skips the update)
    data_wait    time blocked in a DataLoader iterator's __next__, inline loading included
    load_batch   one DataLoader fetch (in a worker process, or inline): samples, and
                 cpu_ns, the fetching thread's CPU time (the span is wall time)
    forward      from the step's data (or the previous backward/update) to backward
    backward     torch.autograd.backward
    optimizer    the update itself
    copy         Tensor.to/.cuda host -> device: bytes, pinned, non_blocking, the GPU
    host_sync    .item() .tolist() .cpu() bool() .to("cpu") torch.cuda.synchronize: counted
                 and timed per call site (file:line); spans for long ones
    checkpoint   torch.save, torch.distributed.checkpoint saves, safetensors.torch.save_file
                 and save_model (Hugging Face weights)
    collectives  torch.distributed.all_reduce, broadcast, barrier, ...: bytes, time
    dataloader   a counters record per DataLoader built: num_workers, pin_memory, ...
    ddp          a counters record per DistributedDataParallel model: gradient bytes, buckets;
                 its buffer broadcast at each forward, as a "broadcast" collective
    precision    a counters record at the first update and whenever it changes: the bits the
                 step's math ran in (torch.autocast entered since the last update or still
                 active, else the parameters' dtype), and whether fp32 matmuls may use TF32
    model_shapes a counters record at the first update: the optimizer's 4-D (convolution)
                 weights and those laid out NCHW rather than channels_last, and its 2-D
                 (Linear, Embedding) weights and those with a size not a multiple of 8
    exit         a counters record when the process exits through exit handlers (sys.exit,
                 an uncaught exception: its "Type: message"), with the steps seen

One rank of a torchrun/Slurm/MPI job (docs/ranks.md) records into
``$SATURATE_RUN_DIR/rank-<r>/``, names its rank in the meta line, and writes its
Python stacks to ``stacks-<pid>.txt`` there on SIGUSR2 (saturate watch asks for
them when the ranks stop making progress).

Never breaks the job: a hook that cannot be installed is listed in the file's
meta line (``auto.missing``), an error while recording is counted and
swallowed, and the original function always runs. Nothing is printed.

Thread-safety: events from any thread go to one buffer under a lock; the
thread that records writes the buffer out every 100 ms (no thread of our own),
and at exit. A forked child (a DataLoader worker) drops the parent's buffer,
writes its own file, and writes every event through at once, because workers
leave with os._exit.
"""

import atexit
import functools
import json
import os
import sys
import threading
import time

FLUSH_NS = 100_000_000  # buffered events are written at least this often
SYNC_SPAN_NS = 20_000  # host syncs at least this long also get a span of their own
EXIT_GIL_RELEASE_S = 0.1  # how long the exit handler lets Gloo's threads run (_at_exit)

_now = time.monotonic_ns  # CLOCK_MONOTONIC on Linux: the clock of the spans files
_tid = threading.get_native_id
_cpu_now = time.thread_time_ns  # CPU time of the calling thread


# ---- the spans file ------------------------------------------------------------------


class _Writer:
    """Buffers event lines and appends them to spans-<pid>-auto.jsonl."""

    def __init__(self, run_dir, info, rank=None):
        self.run_dir = run_dir
        self.info = info  # the meta line's "auto" object, filled as hooks install
        self.rank = rank  # the meta line's "rank" object, for one rank of several
        self.stacks = None  # (pid, file name) where SIGUSR2 writes this process's stacks
        self.lock = threading.Lock()
        self.lines = []
        self.fd = -1
        self.pid = os.getpid()
        self.last_flush_ns = _now()
        self.write_through = _spawned_worker()
        self.errors = 0
        self.flush_hooks = []  # called before each write, to add aggregate records

    def after_fork(self):
        self.lock = threading.Lock()
        self.lines = []
        self.fd = -1
        self.pid = os.getpid()
        self.write_through = True

    def emit(self, line):
        with self.lock:
            self.lines.append(line)
        if self.write_through or _now() - self.last_flush_ns >= FLUSH_NS:
            self.flush()

    def _open(self):
        os.makedirs(self.run_dir, exist_ok=True)
        path = os.path.join(self.run_dir, "spans-%d-auto.jsonl" % self.pid)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.info["argv"] = list(getattr(sys, "argv", []))  # complete by now (python -m)
        meta = {"ph": "M", "pid": self.pid, "comm": _comm(), "clock": "CLOCK_MONOTONIC",
                "ts_ns": _now(), "unix_ns": time.time_ns(), "source": "auto", "auto": self.info}
        if self.rank is not None:
            meta["rank"] = self.rank
        if self.stacks is not None and self.stacks[0] == self.pid:
            meta["stacks"] = self.stacks[1]
        os.write(self.fd, (json.dumps(meta, separators=(",", ":")) + "\n").encode())

    def flush(self):
        for hook in self.flush_hooks:
            hook()
        with self.lock:
            lines, self.lines = self.lines, []
            self.last_flush_ns = _now()
            if not lines:
                return
            try:
                if self.fd < 0:
                    self._open()
                os.write(self.fd, "".join(lines).encode("utf-8", "replace"))
            except OSError:
                self.errors += 1


def _spawned_worker():
    """A multiprocessing 'spawn' child (e.g. a DataLoader worker): it may
    leave without exit handlers, so it writes every event at once."""
    return "--multiprocessing-fork" in getattr(sys, "argv", ())


def _comm():
    try:
        with open("/proc/self/comm") as f:
            return f.read().strip()
    except OSError:
        return os.path.basename(sys.executable or "python")


def _jstr(s):
    return json.dumps(str(s), ensure_ascii=False)


_w = None  # the _Writer, once installed
_state = threading.local()


def _span(name, cat, t0, t1, args=None, labels=None):
    extra = ""
    if args:
        extra += ',"args":{%s}' % ",".join('"%s":%d' % kv for kv in args.items())
    if labels:
        extra += ',"labels":{%s}' % ",".join('"%s":%s' % kv for kv in labels.items())
    _w.emit('{"ph":"X","name":"%s","cat":"%s","ts_ns":%d,"dur_ns":%d,"pid":%d,"tid":%d%s}\n'
            % (name, cat, t0, t1 - t0, _w.pid, _tid(), extra))


def _counters(name, args, labels=None):
    extra = ""
    if labels:
        extra = ',"labels":{%s}' % ",".join('"%s":%s' % kv for kv in labels.items())
    body = ",".join('"%s":%d' % kv for kv in args.items())
    return ('{"ph":"C","name":"%s","ts_ns":%d,"pid":%d,"tid":%d,"args":{%s}%s}\n'
            % (name, _now(), _w.pid, _tid(), body, extra))


# ---- where a call came from ------------------------------------------------------------

_internal_prefixes = [os.path.dirname(os.path.abspath(__file__)) + os.sep]
_code_kind = {}  # code object -> _USER, _OURS or _TORCH
_site_strings = {}  # (file, line) -> JSON string "file:line"
_USER, _OURS, _TORCH = 0, 1, 2


def _library_is_internal(module):
    """Sites inside `module`'s package count as the library's, like torch's: a
    Hugging Face Accelerate DataLoader is "built at" the `accelerator.prepare`
    call (the user's, or the Trainer's), not inside accelerate/data_loader.py."""
    _internal_prefixes.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)


def _kind_of(filename):
    if filename.startswith(_internal_prefixes[0]):
        return _OURS
    return _TORCH if any(filename.startswith(p) for p in _internal_prefixes[1:]) else _USER


def _caller(frame=None):
    """(site, via) of the call being recorded: the first frame, from `frame`
    (default: the caller's) outwards, outside this module and torch, as a
    JSON string "file:line", and the torch function the call went through
    ("" when the user's code called directly)."""
    if frame is None:
        frame = sys._getframe(1)
    via = ""
    while frame is not None:
        code = frame.f_code
        kind = _code_kind.get(code)
        if kind is None:
            kind = _code_kind[code] = _kind_of(code.co_filename)
        if kind == _USER:
            key = (code.co_filename, frame.f_lineno)
            site = _site_strings.get(key)
            if site is None:
                site = _site_strings[key] = _jstr("%s:%d" % (_short(key[0]), key[1]))
            return site, via
        if kind == _TORCH and not via:
            via = getattr(code, "co_qualname", code.co_name)
        frame = frame.f_back
    return '"?"', via


def _site():
    return _caller()[0]


def _short(path):
    """A path relative to the working directory when it is under it."""
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


# ---- guarded recording -------------------------------------------------------------------


def _safe(fn):
    """Recording code must never raise into the job."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:
            _w.errors += 1
            return None

    return wrapper


def _depth_enter(key):
    d = getattr(_state, key, 0)
    setattr(_state, key, d + 1)
    return d == 0


def _depth_exit(key):
    setattr(_state, key, getattr(_state, key, 1) - 1)


# ---- steps and phases --------------------------------------------------------------------

_steps = [0]
_updates = [0]  # the lead optimizer's updates, also when the job marks its own steps
_lead = [None]  # weak reference to the optimizer whose updates mark steps
_explicit = [False]  # the job marks its own steps (saturate.step()): no phases or marks here


def explicit_steps():
    """Called by saturate.step(): the process marks its own steps and phases,
    which doctor prefers, so the recorder stops recording its own (and their
    cost). Everything else (syncs, copies, saves, data waits) goes on."""
    _explicit[0] = True


@_safe
def _forward_starts(t):
    _state.forward_start = t


@_safe
def _emit_forward(t_backward):
    start = getattr(_state, "forward_start", None)
    if start is not None and t_backward > start and not _explicit[0]:
        _span("forward", "user", start, t_backward)
    _state.forward_start = None


@_safe
def _update_done(optimizer, t0, t1):
    """An optimizer update ran from t0 to t1: the optimizer phase, and a
    step mark when it is the lead optimizer (one mark per training step even
    with several optimizers)."""
    import weakref

    lead = _lead[0]() if _lead[0] is not None else None
    if lead is None:
        _lead[0] = weakref.ref(optimizer)
        lead = optimizer
    if lead is optimizer:
        _updates[0] += 1
        _record_precision(optimizer)
        if not _shapes_recorded[0]:
            _shapes_recorded[0] = True
            _record_shapes(optimizer)
    if _explicit[0]:
        return
    _span("optimizer", "user", t0, t1)
    _state.forward_start = t1
    if lead is optimizer:
        _steps[0] += 1
        _w.emit('{"ph":"step","step":%d,"ts_ns":%d,"pid":%d,"tid":%d}\n'
                % (_steps[0], t1, _w.pid, _tid()))


def _closure_starts(args, kwargs, t0):
    """optimizer.step(closure) runs forward and backward inside the update
    (LBFGS, Lightning's automatic optimization): forward starts with it."""
    if (args and callable(args[0])) or callable(kwargs.get("closure")):
        _state.forward_start = t0


def _timed_update(step):
    """Wraps an optimizer's step (torch < 2.0, no global hooks)."""
    if getattr(step, "_saturate_wrapped", False):
        return step

    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        if not _depth_enter("opt"):
            try:
                return step(self, *args, **kwargs)
            finally:
                _depth_exit("opt")
        t0 = _now()
        _closure_starts(args, kwargs, t0)
        try:
            return step(self, *args, **kwargs)
        finally:
            _depth_exit("opt")
            _state.updates = getattr(_state, "updates", 0) + 1
            _update_done(self, t0, _now())

    wrapper._saturate_wrapped = True
    return wrapper


def _hook_optimizer(torch):
    import importlib

    opt_mod = importlib.import_module("torch.optim.optimizer")
    if hasattr(opt_mod, "register_optimizer_step_pre_hook"):
        def pre(optimizer, args, kwargs):
            if _depth_enter("opt"):
                _state.opt_t0 = _now()
                _closure_starts(args, kwargs, _state.opt_t0)

        def post(optimizer, args, kwargs):
            _depth_exit("opt")
            if getattr(_state, "opt", 0) == 0:
                _state.updates = getattr(_state, "updates", 0) + 1
                _update_done(optimizer, getattr(_state, "opt_t0", _now()), _now())

        opt_mod.register_optimizer_step_pre_hook(pre)
        opt_mod.register_optimizer_step_post_hook(post)
        return "global step hooks"
    # torch 1.x: wrap each optimizer class's step once, after its own
    # __init__ (which installs the profiler's wrapper) has run.
    Optimizer = torch.optim.Optimizer
    init = Optimizer.__init__

    @functools.wraps(init)
    def init_wrapper(self, *args, **kwargs):
        init(self, *args, **kwargs)
        cls = type(self)
        try:
            cls.step = _timed_update(cls.step)
        except Exception:
            pass

    Optimizer.__init__ = init_wrapper
    return "step wrappers"


def _hook_grad_scaler(torch):
    classes = []
    for mod_name in ("amp", "cuda.amp"):
        mod = torch
        for part in mod_name.split("."):
            mod = getattr(mod, part, None)
        cls = getattr(mod, "GradScaler", None) if mod is not None else None
        if cls is not None and "step" in cls.__dict__ and cls not in classes:
            classes.append(cls)
    for cls in classes:
        step = cls.__dict__["step"]

        @functools.wraps(step)
        def wrapper(self, optimizer, *args, _step=step, **kwargs):
            before = getattr(_state, "updates", 0)
            t0 = _now()
            try:
                return _step(self, optimizer, *args, **kwargs)
            finally:
                if getattr(_state, "updates", 0) == before:  # update skipped (inf/NaN grads)
                    _update_done(optimizer, t0, _now())

        cls.step = wrapper
    if not classes:
        raise RuntimeError("no GradScaler class")
    return "%d class(es)" % len(classes)


def _hook_backward(torch):
    backward = torch.autograd.backward

    @functools.wraps(backward)
    def wrapper(*args, **kwargs):
        if not _depth_enter("bwd"):  # reentrant (activation checkpointing)
            try:
                return backward(*args, **kwargs)
            finally:
                _depth_exit("bwd")
        t0 = _now()
        _emit_forward(t0)
        try:
            return backward(*args, **kwargs)
        finally:
            _depth_exit("bwd")
            t1 = _now()
            if not _explicit[0]:
                _safe(_span)("backward", "user", t0, t1)
            _forward_starts(t1)

    torch.autograd.backward = wrapper
    return "torch.autograd.backward"


# ---- precision ----------------------------------------------------------------------------

_DTYPE_BITS = {"torch.float16": 16, "torch.bfloat16": 16, "torch.float32": 32,
               "torch.float64": 64}
_amp_bits = [0]  # the fewest bits of an enabled autocast entered since the lead's last update
_autocast_regions = threading.local()  # .bits: this thread's open regions' bits, innermost last
_precision = [None]  # the values of the last "precision" record
_shapes_recorded = [False]


def _hook_autocast(torch):
    """torch.autocast's __enter__ and __exit__ (torch.cuda.amp.autocast and the
    decorator form go through them): notes the dtype of every enabled region,
    and which regions are open on each thread (asking torch each step would
    cost more)."""
    cls = torch.autocast
    enter, exit_ = cls.__enter__, cls.__exit__

    @functools.wraps(enter)
    def enter_wrapper(self, *args, **kwargs):
        out = enter(self, *args, **kwargs)
        _autocast_entered(self)
        return out

    @functools.wraps(exit_)
    def exit_wrapper(self, *args, **kwargs):
        try:
            return exit_(self, *args, **kwargs)
        finally:
            _autocast_exited()

    cls.__enter__, cls.__exit__ = enter_wrapper, exit_wrapper
    return "torch.autocast"


def _open_regions():
    regions = getattr(_autocast_regions, "bits", None)
    if regions is None:
        regions = _autocast_regions.bits = []
    return regions


@_safe
def _autocast_entered(ctx):
    bits = (_DTYPE_BITS.get(str(getattr(ctx, "fast_dtype", None)), 0)
            if getattr(ctx, "_enabled", False) else 0)
    _open_regions().append(bits)  # 0: autocast(enabled=False) turns it off inside
    if bits and (not _amp_bits[0] or bits < _amp_bits[0]):
        _amp_bits[0] = bits


@_safe
def _autocast_exited():
    regions = _open_regions()
    if regions:  # not when the region opened before the hook
        regions.pop()


@_safe
def _record_precision(optimizer):
    """At each update of the lead optimizer: the bits its step's math ran in
    (an autocast region entered since the last update, or one still open: a
    loop wholly inside it). Written when it changes, so the last record
    describes the run's end."""
    torch = sys.modules["torch"]
    regions = _open_regions()
    amp, _amp_bits[0] = _amp_bits[0] or (regions[-1] if regions else 0), 0
    params = optimizer.param_groups[0]["params"] if optimizer.param_groups else []
    param_bits = _DTYPE_BITS.get(str(params[0].dtype), 0) if params else 0
    getter = getattr(torch, "get_float32_matmul_precision", None)
    values = {"precision_bits": amp or param_bits or 32,
              "autocast_bits": amp, "param_bits": param_bits,
              "tf32_matmul": int(getter is not None and getter() != "highest")}
    if values != _precision[0]:
        _precision[0] = values
        _w.emit(_counters("precision", values))


@_safe
def _record_shapes(optimizer):
    """Once: what decides whether the math can use tensor cores, besides its
    precision (doctor's model_config advice names what to change)."""
    torch = sys.modules["torch"]
    conv = nchw = matrix = unaligned = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.dim() == 4:
                conv += 1
                nchw += p.is_contiguous() and not p.is_contiguous(
                    memory_format=torch.channels_last)
            elif p.dim() == 2:
                matrix += 1
                unaligned += p.shape[0] % 8 != 0 or p.shape[1] % 8 != 0
    _w.emit(_counters("model_shapes", {"conv_weights": conv, "conv_nchw_weights": nchw,
                                       "matrix_weights": matrix,
                                       "matrix_unaligned_weights": unaligned}))


# ---- data ---------------------------------------------------------------------------------

_loader_ids = [0]


@_safe
def _record_dataloader(loader, site):
    loader._saturate_id = _loader_ids[0]
    _loader_ids[0] += 1
    prefetch = getattr(loader, "prefetch_factor", None)
    args = {"loader_id": loader._saturate_id,
            "num_workers": int(getattr(loader, "num_workers", 0) or 0),
            "pin_memory": int(bool(getattr(loader, "pin_memory", False))),
            "batch_size": int(loader.batch_size) if loader.batch_size is not None else -1,
            "persistent_workers": int(bool(getattr(loader, "persistent_workers", False))),
            "prefetch_factor": int(prefetch) if prefetch is not None else -1,
            "drop_last": int(bool(getattr(loader, "drop_last", False)))}
    labels = {"site": site, "dataset": _jstr(type(loader.dataset).__name__)}
    _w.emit(_counters("dataloader", args, labels))


def _batch_size(batch, args):
    """Adds the batch's first tensor's `samples` (leading dimension) and `elems`
    (elements): ranks with uneven batches or sequence lengths show it."""
    for _ in range(3):  # tensor, [tensor, ...], {"input": tensor, ...}
        if isinstance(batch, (list, tuple)):
            batch = batch[0] if batch else None
        elif isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0 and hasattr(batch, "numel"):
        args["samples"] = int(shape[0])
        args["elems"] = int(batch.numel())


def _hook_dataloader(torch):
    from torch.utils.data import dataloader as dl

    DataLoader = dl.DataLoader
    init = DataLoader.__init__

    @functools.wraps(init)
    def init_wrapper(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not hasattr(self, "_saturate_id"):  # a subclass's super().__init__ ran it
            _record_dataloader(self, _site())

    DataLoader.__init__ = init_wrapper

    Iter = dl._BaseDataLoaderIter
    iter_init = Iter.__init__

    @functools.wraps(iter_init)
    def iter_init_wrapper(self, loader, *args, **kwargs):
        self._saturate_id = getattr(loader, "_saturate_id", -1)
        iter_init(self, loader, *args, **kwargs)

    Iter.__init__ = iter_init_wrapper
    next_ = Iter.__next__

    @functools.wraps(next_)
    def next_wrapper(self):
        t0 = _now()
        batch = None
        try:
            batch = next_(self)
            return batch
        finally:
            t1 = _now()
            args = {"loader_id": getattr(self, "_saturate_id", -1),
                    "batch": getattr(self, "_num_yielded", 0)}
            _safe(_batch_size)(batch, args)
            _safe(_span)("data_wait", "loader", t0, t1, args)
            _forward_starts(t1)

    Iter.__next__ = next_wrapper
    return "DataLoader"


def _hook_fetch(torch):
    from torch.utils.data._utils import fetch

    hooked = 0
    for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
        cls = getattr(fetch, name, None)
        if cls is None or "fetch" not in cls.__dict__:
            continue
        orig = cls.__dict__["fetch"]

        @functools.wraps(orig)
        def wrapper(self, index, _orig=orig):
            t0 = _now()
            c0 = _cpu_now()
            _state.fetch = getattr(_state, "fetch", 0) + 1
            try:
                out = _orig(self, index)
            finally:
                _state.fetch -= 1
            try:
                samples = len(index) if self.auto_collation else 1
            except TypeError:
                samples = 1
            # The span is wall time (reads that block included); cpu_ns is what
            # the fetching thread computed (decode, transforms, collation).
            _safe(_span)("load_batch", "loader", t0, _now(),
                         {"samples": samples, "cpu_ns": _cpu_now() - c0})
            return out

        cls.fetch = wrapper
        hooked += 1
    if not hooked:
        raise RuntimeError("no dataset fetcher classes")
    return "%d fetchers" % hooked


# ---- torch.compile ------------------------------------------------------------------------

def _hook_compile(callback):
    """torch.compile's compilations, through Dynamo's compile callbacks (torch >= 2.3;
    imported by the first torch.compile'd call, so a job that never compiles is not
    touched): a span `compile` from the start of the outermost compilation to its
    end. From torch 2.6 the handler calls them for the outermost one only, paired
    across threads; before, also for nested ones (Dynamo, then Inductor), hence the
    depth. `trigger` (torch >= 2.8): dynamo (a new frame, or a recompile when a
    guard failed), lazy_backward (the backward graph, at the first backward), ..."""
    handler = callback.callback_handler
    open_ = [0, 0]  # depth, start of the outermost

    def on_start(*args):
        if open_[0] == 0:
            open_[1] = _now()
        open_[0] += 1

    def on_end(*args):
        if open_[0] == 0:
            return
        open_[0] -= 1
        if open_[0]:
            return
        trigger = getattr(getattr(args[0], "callback_trigger", None), "name", "") if args else ""
        _span("compile", "compile", open_[1], _now(), None,
              {"trigger": _jstr(trigger.lower() or "?")})

    handler.register_start_callback(_safe(on_start))
    handler.register_end_callback(_safe(on_end))
    return "dynamo compile callbacks"


# ---- host syncs and copies ----------------------------------------------------------------

# (site, op, device) -> [count, total_ns, max_ns, written count, last update, updates with calls,
#                        written intervals]
_syncs = {}
_exiting = [False]


def _record_sync(op, device, t0, t1, frame=None):
    """Counts one host sync at its call site (`frame`: the caller's, when known)."""
    try:
        if device == "cpu" and getattr(_state, "fetch", 0):
            return  # a transform's CPU math while loading a batch (RNG draws): not a sync
        site, via = _caller(frame)
        if via:
            if device == "cpu":
                return  # torch's own CPU bookkeeping (the DataLoader's seed, Adam's step count)
            op = "%s via %s" % (op, via)  # e.g. clip_grad_norm_ checking for inf
        key = (site, op, device)
        s = _syncs.get(key)
        if s is None:
            s = _syncs[key] = [0, 0, 0, 0, -1, 0, 0]
        dur = t1 - t0
        s[0] += 1
        if s[4] != _updates[0]:  # the first call between these two updates
            s[4] = _updates[0]
            s[5] += 1
        s[1] += dur
        if dur > s[2]:
            s[2] = dur
        if dur >= SYNC_SPAN_NS:
            _span("host_sync", "user", t0, t1, None,
                  {"site": site, "op": _jstr(op), "device": _jstr(device)})
        elif _now() - _w.last_flush_ns >= FLUSH_NS:
            _w.flush()  # the counters are written at flushes: keep them current
    except Exception:
        _w.errors += 1


def _write_sync_counters():
    """Cumulative per-site totals, for the sites that changed (flush hook).
    `steps` of `intervals`: in how many of the stretches between the lead
    optimizer's updates (so far, the current one included) the site ran, which
    tells a call made every step from a burst (an evaluation loop every N
    steps) with the same calls per step. A site is written again when its count
    changed, and at exit when the intervals did (a site called only early on
    ran in few of them)."""
    intervals = _updates[0] + 1
    for (site, op, device), s in list(_syncs.items()):
        if s[0] != s[3] or (_exiting[0] and s[6] != intervals):
            s[3], s[6] = s[0], intervals
            line = _counters("host_sync", {"count": s[0], "total_ns": s[1], "max_ns": s[2],
                                           "steps": s[5], "intervals": intervals},
                             {"site": site, "op": _jstr(op), "device": _jstr(device)})
            with _w.lock:
                _w.lines.append(line)


def _wrap_sync(owner, name, op, device_of):
    orig = getattr(owner, name)
    getframe = sys._getframe

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        t0 = _now()
        try:
            return orig(*args, **kwargs)
        finally:
            _record_sync(op, device_of(args), t0, _now(), getframe(1))

    setattr(owner, name, wrapper)


def _tensor_device(args):
    return "cuda" if args and getattr(args[0], "is_cuda", False) else "cpu"


def _hook_syncs(torch):
    Tensor = torch.Tensor
    for name in ("item", "tolist", "cpu"):
        _wrap_sync(Tensor, name, "." + name + "()", _tensor_device)
    # `if loss > x:` reads a value back just as .item() does. float(loss) and
    # int(t) are left alone: torch 2 warns when they convert a tensor that
    # requires grad, and a wrapper would move that warning's file:line to here.
    _wrap_sync(Tensor, "__bool__", "bool()", _tensor_device)
    _wrap_sync(torch.cuda, "synchronize", "torch.cuda.synchronize()", lambda args: "cuda")
    return ".item .tolist .cpu bool() torch.cuda.synchronize"


@_safe
def _record_to(src, dst, args, kwargs, t0, t1):
    src_cuda, dst_cuda = src.is_cuda, dst.is_cuda
    non_blocking = bool(kwargs.get("non_blocking", False)) or any(a is True for a in args)
    if dst_cuda and not src_cuda:
        nbytes = src.nelement() * src.element_size()
        gpu = getattr(getattr(dst, "device", None), "index", None)
        _span("copy", "user", t0, t1,
              {"bytes": nbytes, "pinned": int(src.is_pinned()), "non_blocking": int(non_blocking),
               "gpu": gpu if isinstance(gpu, int) else -1},
              {"site": _site()})
    elif src_cuda and not dst_cuda and not non_blocking:
        _record_sync(".to(cpu)", "cuda", t0, t1)


def _hook_copies(torch):
    Tensor = torch.Tensor
    for name in ("to", "cuda"):
        orig = getattr(Tensor, name)

        @functools.wraps(orig)
        def wrapper(self, *args, _orig=orig, **kwargs):
            t0 = _now()
            out = _orig(self, *args, **kwargs)
            if out is not self and (out.is_cuda or self.is_cuda):
                _record_to(self, out, args, kwargs, t0, _now())
            return out

        setattr(Tensor, name, wrapper)
    return ".to .cuda"


# ---- checkpoints and collectives -------------------------------------------------------------


def _wrap_save(owner, name, op):
    orig = getattr(owner, name, None)
    if orig is None or getattr(orig, "_saturate_wrapped", False):
        return False

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        if not _depth_enter("save"):  # a save inside a save (DCP writes with torch.save)
            try:
                return orig(*args, **kwargs)
            finally:
                _depth_exit("save")
        site = _safe(_site)()
        t0 = _now()
        try:
            return orig(*args, **kwargs)
        finally:
            _depth_exit("save")
            _record_save(op, site, args, kwargs, t0, _now())

    wrapper._saturate_wrapped = True
    setattr(owner, name, wrapper)
    return True


@_safe
def _record_save(op, site, args, kwargs, t0, t1):
    # torch.save(obj, f), safetensors' save_file(tensors, filename) and save_model(model, filename)
    target = kwargs.get("f", kwargs.get("filename", args[1] if len(args) > 1 else None))
    nbytes = -1
    if isinstance(target, (str, bytes, os.PathLike)):
        try:
            nbytes = os.path.getsize(target)
        except OSError:
            pass
    _span("checkpoint", "checkpoint", t0, t1, {"bytes": nbytes},
          {"site": site or _jstr("?"), "op": _jstr(op)})


def _hook_save(torch):
    _wrap_save(torch, "save", "torch.save")
    return "torch.save"


def _hook_safetensors(st):
    """safetensors.torch's file writers: Hugging Face saves model weights with
    them (`save_pretrained`, the Trainer's checkpoints), not with torch.save."""
    names = [n for n in ("save_file", "save_model")
             if _wrap_save(st, n, "safetensors." + n)]
    if not names:
        raise RuntimeError("no save functions")
    return ", ".join(names)


def _hook_dcp(dcp):
    names = [n for n in ("save", "save_state_dict", "async_save") if _wrap_save(dcp, n, "dcp." + n)]
    if not names:
        raise RuntimeError("no save functions")
    return ", ".join(names)


COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "barrier", "all_to_all", "all_to_all_single",
               "reduce", "gather", "scatter", "all_gather_object", "broadcast_object_list")


@_safe
def _record_collective(name, args, kwargs, t0, t1):
    tensor = args[0] if args else kwargs.get("tensor")
    nbytes = -1
    if hasattr(tensor, "element_size") and hasattr(tensor, "nelement"):
        nbytes = tensor.nelement() * tensor.element_size()
    _span(name, "user", t0, t1, {"bytes": nbytes, "async_op": int(bool(kwargs.get("async_op")))},
          {"site": _site()})


def _hook_distributed(dist):
    c10d = getattr(dist, "distributed_c10d", dist)
    hooked = []
    for name in COLLECTIVES:
        orig = getattr(c10d, name, None)
        if orig is None or getattr(orig, "_saturate_wrapped", False):
            continue

        @functools.wraps(orig)
        def wrapper(*args, _orig=orig, _name=name, **kwargs):
            t0 = _now()
            try:
                return _orig(*args, **kwargs)
            finally:
                _record_collective(_name, args, kwargs, t0, _now())

        wrapper._saturate_wrapped = True
        for owner in (c10d, dist):
            if getattr(owner, name, None) is orig:
                setattr(owner, name, wrapper)
        hooked.append(name)
    if not hooked:
        raise RuntimeError("no collectives found")
    return "%d collectives" % len(hooked)


def _hook_ddp(torch):
    """DistributedDataParallel: its backward all-reduces the gradients, so on
    ranks that wait for a slower one the wait is inside backward. Records the
    gradient bytes and bucket size once per model. A model with buffers
    (BatchNorm's running stats) also broadcasts them from rank 0 at the start
    of every forward (broadcast_buffers=True, the default): the others wait
    for a slower rank there, so that broadcast is recorded as a collective."""
    DDP = torch.nn.parallel.DistributedDataParallel
    init = DDP.__init__
    if getattr(init, "_saturate_wrapped", False):
        return "DistributedDataParallel"

    @functools.wraps(init)
    def init_wrapper(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _safe(_record_ddp)(self, kwargs)

    init_wrapper._saturate_wrapped = True
    DDP.__init__ = init_wrapper
    sync = getattr(DDP, "_sync_buffers", None)
    if sync is not None:
        @functools.wraps(sync)
        def sync_wrapper(self, *args, **kwargs):
            t0 = _now()
            try:
                return sync(self, *args, **kwargs)
            finally:
                _record_buffer_sync(self, t0, _now())

        DDP._sync_buffers = sync_wrapper
    return "DistributedDataParallel"


@_safe
def _record_buffer_sync(ddp, t0, t1):
    nbytes = getattr(ddp, "_saturate_buffer_bytes", None)
    if nbytes is None:
        nbytes = sum(b.nelement() * b.element_size() for b in ddp.module.buffers())
        ddp._saturate_buffer_bytes = nbytes
    _span("broadcast", "user", t0, t1, {"bytes": nbytes, "async_op": 0},
          {"site": _site(), "op": _jstr("DDP broadcast_buffers")})


def _record_ddp(ddp, kwargs):
    grad_bytes = sum(p.nelement() * p.element_size()
                     for p in ddp.module.parameters() if p.requires_grad)
    bucket_mb = kwargs.get("bucket_cap_mb")
    _w.emit(_counters("ddp", {
        "grad_bytes": grad_bytes,
        "bucket_cap_bytes": int((bucket_mb if bucket_mb is not None else 25) * (1 << 20)),
        "find_unused_parameters": int(bool(kwargs.get("find_unused_parameters"))),
        "world_size": _world_size()},
        {"site": _site()}))


def _world_size():
    rank = _w.rank
    return rank["world_size"] if rank else 0


# ---- installing ---------------------------------------------------------------------------------


class _LoaderProxy:
    """Runs `done(module)` once the real loader has executed the module."""

    def __init__(self, loader, done):
        self._loader, self._done = loader, done

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._loader.exec_module(module)
        # Hand the module its real loader back, then hook.
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._done(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImport:
    """A meta path finder that calls back after a watched module is imported."""

    def __init__(self):
        self.callbacks = {}
        self.busy = set()

    def watch(self, name, callback):
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        self.callbacks.setdefault(name, []).append(callback)
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def find_spec(self, name, path=None, target=None):
        if name not in self.callbacks or name in self.busy:
            return None
        import importlib.util

        self.busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        except Exception:
            return None
        finally:
            self.busy.discard(name)
        if spec is None or spec.loader is None:
            return None
        # The callbacks go when the module is executed, not now: find_spec alone
        # is also how libraries ask whether a package is installed (Hugging
        # Face's is_torch_available), and that spec is never executed.
        spec.loader = _LoaderProxy(spec.loader, lambda module: self._imported(name, module))
        return spec

    def _imported(self, name, module):
        for callback in self.callbacks.pop(name, []):
            callback(module)


_info = {"version": 1, "hooks": {}, "missing": {}}
_post_import = _PostImport()


def _try_hook(name, fn, module):
    try:
        _info["hooks"][name] = fn(module) or "on"
    except Exception as e:  # an older or newer torch: say what is not captured
        _info["missing"][name] = "%s: %s" % (type(e).__name__, e)


def _on_torch(torch):
    _info["torch"] = str(getattr(torch, "__version__", "?"))
    _internal_prefixes.append(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
    for name, fn in (("optimizer", _hook_optimizer), ("grad_scaler", _hook_grad_scaler),
                     ("backward", _hook_backward), ("autocast", _hook_autocast),
                     ("dataloader", _hook_dataloader), ("fetch", _hook_fetch),
                     ("host_sync", _hook_syncs), ("copy", _hook_copies), ("save", _hook_save),
                     ("ddp", _hook_ddp)):
        _try_hook(name, fn, torch)
    _post_import.watch("torch.distributed",
                       lambda dist: _try_hook("collectives", _hook_distributed, dist))
    _post_import.watch("torch.distributed.checkpoint",
                       lambda dcp: _try_hook("dcp", _hook_dcp, dcp))
    _post_import.watch("torch._dynamo.callback",
                       lambda callback: _try_hook("compile", _hook_compile, callback))


def installed():
    """Whether this process records (from any copy of this module)."""
    return _w is not None


def install(run_dir):
    """Records into `run_dir` from now on; a second call (from any copy of
    this module: the bootstrap's or saturate.auto's) does nothing."""
    global _w
    me = sys.modules.setdefault("saturate_autotrace", sys.modules[__name__])
    if me is not sys.modules[__name__]:
        return me.install(run_dir)
    if _w is not None:
        return
    _info["python"] = sys.version.split()[0]
    ranks = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID",
                                        "SLURM_LOCALID", "SLURM_NTASKS") if k in os.environ}
    if ranks:
        _info["env"] = ranks
    rank = rank_from_env()
    _w = _Writer(rank_run_dir(os.path.abspath(run_dir), rank), _info, rank)
    _w.flush_hooks.append(_write_sync_counters)
    if rank is not None:
        _safe(_install_stack_dump)()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork)
    atexit.register(_at_exit)
    _safe(_hook_excepthook)()
    _post_import.watch("torch", _on_torch)
    # Watched from the start, not from _on_torch: safetensors.torch imports
    # torch itself, and would be caught half-initialized there. Hugging Face
    # binds save_file by name when it imports it, so it must be wrapped by then.
    _post_import.watch("safetensors.torch",
                       lambda st: _try_hook("safetensors", _hook_safetensors, st))
    _post_import.watch("accelerate", _safe(_library_is_internal))


# ---- ranks (docs/ranks.md) -------------------------------------------------------------

# (launcher, rank, local rank, world size) variables, in order of precedence; the
# same table as src/base/rank_env.cc.
_LAUNCHERS = (("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
              ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS"),
              ("mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
              ("pmi", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"))


def _count(text):
    return int(text) if text is not None and text.isdigit() else None


def rank_from_env(env=os.environ):
    """{"rank", "local_rank", "world_size", "host", "launcher"} for one rank of a
    job of two or more, else None. A Slurm batch script (no step size) is no rank."""
    for launcher, rank_var, local_var, world_var in _LAUNCHERS:
        if rank_var not in env or world_var not in env:
            continue
        rank, world = _count(env[rank_var]), _count(env[world_var])
        if rank is None or world is None or world < 2 or rank >= world:
            return None
        if launcher == "torchrun" and "TORCHELASTIC_RUN_ID" not in env:
            launcher = "env"
        import socket

        info = {"rank": rank, "local_rank": _count(env.get(local_var)) or 0, "world_size": world,
                "host": env.get("SATURATE_HOSTNAME") or socket.gethostname(),
                "launcher": launcher}
        if env.get("CUDA_VISIBLE_DEVICES"):  # copies name the GPU within this list
            info["cuda_visible_devices"] = env["CUDA_VISIBLE_DEVICES"]
        return info
    return None


def rank_run_dir(run_dir, rank):
    """RUN/rank-<r> for a rank (once: not when run_dir already is it), else RUN."""
    if rank is None:
        return run_dir
    name = "rank-%d" % rank["rank"]
    run_dir = run_dir.rstrip(os.sep) or run_dir
    return run_dir if os.path.basename(run_dir) == name else os.path.join(run_dir, name)


def _install_stack_dump():
    """SIGUSR2 writes every thread's Python stack to RUN/rank-<r>/stacks-<pid>.txt:
    saturate watch asks for it when ranks stop making progress. Not when the
    program handles SIGUSR2 itself."""
    import faulthandler
    import signal

    if signal.getsignal(signal.SIGUSR2) != signal.SIG_DFL:
        return
    os.makedirs(_w.run_dir, exist_ok=True)
    name = "stacks-%d.txt" % _w.pid
    f = open(os.path.join(_w.run_dir, name), "w")  # kept open: the handler writes to its fd
    faulthandler.register(signal.SIGUSR2, file=f, all_threads=True)
    _w.stacks = (_w.pid, name)
    _w.stacks_file = f


def _after_fork():
    _w.after_fork()
    _syncs.clear()


def _at_exit():
    if _w.errors:  # recording failures, so the report can say spans may be missing
        _w.emit(_counters("autotrace", {"errors": _w.errors}))
    # An exit that ran exit handlers (sys.exit, an uncaught exception): a rank
    # that left its job early, or failed, says so; a killed one cannot.
    error = _uncaught[0]
    if "torch" in _info:  # a process that never imported torch records nothing
        _w.emit(_counters("exit", {"steps": _steps[0], "error": int(error is not None)},
                          {"exception": _jstr(error)} if error else None))
    _exiting[0] = True
    _w.flush()
    # Registered first, this handler runs last, just before the interpreter finalizes. A
    # Gloo worker thread that drops the last reference to a finished collective may be
    # waiting for the GIL (the collective's saved thread-local state holds Python
    # objects). If it gets the GIL only once finalization has begun, Python ends the
    # thread with a forced unwind through a noexcept destructor and torch aborts the rank
    # ("terminate called without an active exception", docs/auto.md). Letting go of the
    # GIL here, while such threads are alive, lets them finish first.
    if "torch.distributed" in sys.modules and _safe(_gloo_threads_alive)():
        time.sleep(EXIT_GIL_RELEASE_S)


def _gloo_threads_alive():
    """Whether a process group's Gloo worker threads still run (torch >= 2 names them
    pt_gloo_*; a destroyed group's are joined)."""
    for task in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % task) as f:
                if f.read().startswith("pt_gloo"):
                    return True
        except OSError:  # the thread has just ended
            pass
    return False


_uncaught = [None]  # "Type: message" of an exception that ended the program


def _hook_excepthook():
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        _uncaught[0] = ("%s: %s" % (kind.__name__, value))[:300]
        previous(kind, value, tb)

    sys.excepthook = excepthook


def install_from_env():
    """The bootstrap's entry: records when SATURATE_RUN_DIR is set and
    SATURATE_AUTO is not 0."""
    run_dir = os.environ.get("SATURATE_RUN_DIR")
    if run_dir and os.environ.get("SATURATE_AUTO", "1") != "0":
        install(run_dir)
