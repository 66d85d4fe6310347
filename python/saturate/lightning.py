"""saturate in PyTorch Lightning: a DataModule over packed datasets and a callback
that records the step phases (docs/install.md, docs/trace.md).

    import lightning as L
    from saturate.lightning import SaturateDataModule, SaturateCallback

    data = SaturateDataModule("data/train.sat", val="data/val.sat", batch_size=64,
                              transforms={"image": [T.RandomResizedCrop(224), T.ToDtype("float32")]})
    trainer = L.Trainer(callbacks=[SaturateCallback("runs/exp1", watch=True)])
    trainer.fit(model, datamodule=data)          # training_step gets dicts: batch["image"], ...

The DataModule hands Lightning ``saturate.Loader`` objects, made when Lightning asks
for them, so that under DDP each rank reads its own shard (the loader takes rank and
world size from torch.distributed; Lightning adds no DistributedSampler to them).
Training epochs follow ``trainer.current_epoch`` (a limited epoch, ``limit_train_batches``,
does not run over into the next); Lightning keeps the training loader's position in its
checkpoints, so a run resumed mid-epoch continues with the next unseen batch. Evaluation
loaders do not shuffle and start from their first batch at every pass.

``SaturateCheckpointIO`` writes Lightning's checkpoints through ``saturate.Checkpointer``:
training stops only while the state is copied to host memory, and a C++ thread writes,
fsyncs and commits it in the background::

    trainer = L.Trainer(plugins=[SaturateCheckpointIO()],
                        callbacks=[ModelCheckpoint(dirpath="ckpt", every_n_train_steps=500)])
    trainer.fit(model, datamodule=data, ckpt_path="last")   # resumes from ckpt/last.ckpt

The callback marks forward, backward and optimizer spans and one ``saturate.step()`` per
optimizer update, which ``saturate doctor`` reads; the loader records its own waits.
Spans are recorded under ``saturate doctor``/``watch`` (SATURATE_RUN_DIR) or into
``run_dir``. Works with ``lightning`` (``lightning.pytorch``) or ``pytorch_lightning``.
"""

from __future__ import annotations

import atexit
import io
import os
import pickle
import re
import shutil
import threading
import time
import weakref
import zipfile
from typing import Any, Dict, List, Optional, Union

try:
    import lightning.pytorch as pl
except ImportError:  # the older, separate package
    try:
        import pytorch_lightning as pl
    except ImportError as e:
        raise ImportError(
            "saturate.lightning needs PyTorch Lightning: pip install lightning") from e

import torch

from . import _trace
from ._watch import watch as _watch
from .checkpoint import Checkpointer, _load_reference, load as _load_checkpoint
from .dist_checkpoint import _write_atomic
from .errors import CorruptionError
from .loader import Loader

PathLike = Union[str, os.PathLike]


class _TrainLoader:
    """The training loader as Lightning sees it: each new pass starts the trainer's current
    epoch (set_epoch does nothing when the loader is already there, e.g. after Lightning
    restored its position from a checkpoint). state_dict/load_state_dict make Lightning
    save and restore the position (it looks for those two methods)."""

    def __init__(self, loader: Loader, module: "SaturateDataModule"):
        self.loader = loader
        self._module = module

    def __iter__(self):
        trainer = self._module.trainer
        if trainer is not None:
            self.loader.set_epoch(trainer.current_epoch)
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> Dict[str, int]:
        # Lightning fetches no batch ahead of a loader that has a length: the loader's
        # position is that of the batches trained on.
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, int]) -> None:
        self.loader.load_state_dict(state)


class _EvalLoader:
    """A validation/test/predict loader: every pass reads the whole set from its first
    batch (the sanity check's two batches do not shift the first validation)."""

    def __init__(self, loader: Loader):
        self.loader = loader

    def __iter__(self):
        if self.loader.state_dict()["batches_done"]:
            self.loader.set_epoch(self.loader.epoch + 1)
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


class SaturateDataModule(pl.LightningDataModule):
    """Lightning's train/val/test/predict loaders, each a ``saturate.Loader`` over a packed
    dataset (a path written by ``saturate pack``, or ``s3://...``).

    Args:
      train, val, test, predict: datasets; a missing one gives Lightning no such loader.
      batch_size: samples per batch (eval_batch_size for the others; default the same).
      **loader_args: any other ``saturate.Loader`` argument (transforms, threads, seed,
        framework, device, max_held_batches, ...), for all four loaders; evaluation loaders
        never shuffle. Lightning keeps one batch alive at a time (it fetches none ahead of
        a loader with a length), so ``max_held_batches`` (saturate's lifetime rule) only
        needs raising for batches the model itself keeps.
    """

    def __init__(
        self,
        train: Optional[PathLike] = None,
        val: Optional[PathLike] = None,
        test: Optional[PathLike] = None,
        predict: Optional[PathLike] = None,
        *,
        batch_size: int = 32,
        eval_batch_size: Optional[int] = None,
        **loader_args: Any,
    ):
        super().__init__()
        self.paths = {"train": train, "val": val, "test": test, "predict": predict}
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.loader_args = loader_args
        self._loaders: Dict[str, Any] = {}
        # Lightning asks for the loaders it finds hooks for: one per dataset given (as
        # LightningDataModule.from_datasets does).
        for name in ("train", "val", "test", "predict"):
            if self.paths[name] is not None:
                setattr(self, f"{name}_dataloader", self._hook(name))

    def loader(self, name: str) -> Loader:
        """The ``saturate.Loader`` for "train", "val", "test" or "predict", made at the
        first call (after torch.distributed is up, when Lightning asks for it)."""
        if name not in self.paths:
            raise ValueError(f"loader: {name!r} (use train, val, test or predict)")
        if self.paths[name] is None:
            raise ValueError(f"SaturateDataModule: no {name} dataset was given")
        if name not in self._loaders:
            args = dict(self.loader_args)
            if name == "train":
                made = _TrainLoader(Loader(self.paths[name], self.batch_size, **args), self)
            else:
                args["shuffle"] = False
                made = _EvalLoader(Loader(self.paths[name], self.eval_batch_size, **args))
            self._loaders[name] = made
        return self._loaders[name].loader

    def _hook(self, name: str):
        def hook():
            self.loader(name)
            return self._loaders[name]

        hook.__name__ = f"{name}_dataloader"
        return hook

    def teardown(self, stage: str) -> None:
        """Stops the loaders' threads once Lightning is done with them."""
        names = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",),
                 "predict": ("predict",)}.get(stage, ())
        for name in names:
            self._loaders.pop(name, None)


class SaturateCallback(pl.Callback):
    """Records Lightning's step phases as saturate trace spans, and optionally watches.

    Spans: ``forward`` (from the batch's start to backward; training_step), ``backward``,
    ``optimizer`` (the step and zero_grad) and ``validation`` (per validation batch); one
    ``saturate.step()`` per optimizer update (with gradient accumulation, per update, not
    per batch). Data waits come from the loader itself.

    Args:
      run_dir: record spans (and samples, with ``watch``) there; None records only where
        the process already does (under ``saturate doctor`` / ``saturate watch``).
      watch: also sample GPUs, host and this process tree into ``run_dir`` while fitting
        (global rank 0 only, as one node's view).
      watch_interval: seconds between watch samples.
    """

    def __init__(self, run_dir: Optional[PathLike] = None, *, watch: bool = False,
                 watch_interval: float = 0.1):
        if watch and run_dir is None:
            raise ValueError("SaturateCallback: watch=True needs a run_dir")
        self.run_dir = os.fspath(run_dir) if run_dir is not None else None
        self.watch = watch
        self.watch_interval = watch_interval
        self._watcher: Optional[_watch] = None
        self._open: Optional[Any] = None  # the phase entered and not yet left
        self._stepped = False
        self._started_trace = False
        self.steps = 0  # optimizer updates marked by this callback

    # Phases: at most one open at a time, closed by the next or at the batch's end.
    def _enter(self, name: str) -> None:
        self._leave()
        self._open = _trace.phase(name)
        self._open.__enter__()

    def _leave(self) -> None:
        if self._open is not None:
            phase, self._open = self._open, None
            phase.__exit__(None, None, None)

    def on_fit_start(self, trainer, pl_module) -> None:
        if self.run_dir is not None and not _trace.enabled():
            _trace.start(self.run_dir)
            self._started_trace = True
        if self.watch and trainer.global_rank == 0:
            self._watcher = _watch(self.run_dir, interval=self.watch_interval).start()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._stepped = False
        self._enter("forward")

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self._enter("backward")

    def on_after_backward(self, trainer, pl_module) -> None:
        self._leave()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self._enter("optimizer")
        self._stepped = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._leave()
        if self._stepped:
            _trace.step()
            self.steps += 1

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx,
                                  dataloader_idx=0) -> None:
        self._enter("validation")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx,
                                dataloader_idx=0) -> None:
        self._leave()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._finish(1)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._finish(0)

    def _finish(self, exit_code: int) -> None:
        self._leave()
        if self._watcher is not None:
            self._watcher.stop(exit_code)
            self._watcher = None
        if self._started_trace:
            _trace.stop()
            self._started_trace = False
        elif _trace.enabled():
            _trace.flush()


_REF_FORMAT = "saturate-checkpoint-ref"
_STORE = ".saturate-checkpoints"  # beside the checkpoint files, in ModelCheckpoint's dirpath
_REF_TMP_RE = re.compile(r"^.+\.ckpt\.tmp-[0-9]+$")  # _write_atomic's temp names


class _Store:
    """One directory's checkpoint data: its Checkpointer (and host pool), the saves taken,
    the next step id (ids follow the ones already there). Opening it removes what an earlier
    run left unnamed: interrupted writes (the Checkpointer does) and committed checkpoints
    whose reference was never written (the job ended between the commit and the reference)."""

    def __init__(self, dir: str, copy_threads: int, max_in_flight: int):
        self.dir = dir
        self.writer = Checkpointer(dir, keep=2**31 - 1, copy_threads=copy_threads,
                                   max_in_flight=max_in_flight)  # Lightning decides what goes
        self.saves = 0
        committed = Checkpointer.list(dir)
        ckpt_dir = os.path.dirname(dir)
        named = _referenced(ckpt_dir)
        for _, path in committed:
            if os.path.normpath(path) not in named:
                shutil.rmtree(path, ignore_errors=True)
        for name in os.listdir(ckpt_dir):  # a reference's temp file, cut by the job's end
            if _REF_TMP_RE.match(name):
                os.remove(os.path.join(ckpt_dir, name))
        self.next_id = max((step for step, _ in committed), default=-1) + 1


class _Publish:
    """A save whose reference file is written once the engine has committed it."""

    def __init__(self, store: _Store, step_id: int, path: str, global_step: Optional[int]):
        self.writer, self.nth = store.writer, store.saves  # done once `nth` writes ended
        self.path, self.global_step = path, global_step
        self.step_dir = os.path.join(store.dir, f"step-{step_id}")


def _referenced(ckpt_dir: str) -> set:
    """The checkpoint directories the reference files in ``ckpt_dir`` name (normalized)."""
    named = set()
    for name in os.listdir(ckpt_dir):
        target = _read_ref(os.path.join(ckpt_dir, name))
        if target is not None:
            named.add(os.path.normpath(target))
    return named


class _Reference:
    """What a reference file holds. torch.save of it pickles a call of
    ``saturate.checkpoint._load_reference(fields)``: ``torch.load`` (``weights_only=False``,
    e.g. ``LightningModule.load_from_checkpoint(path, weights_only=False)``) returns the
    checkpoint it names. The plugin reads the fields without running that call."""

    def __init__(self, fields: Dict[str, Any]):
        self.fields = fields

    def __reduce__(self):
        return (_load_reference, (self.fields,))


# The start of a reference's pickle (torch.save uses protocol 2): the call above.
_REF_PICKLE_HEAD = b"\x80\x02csaturate.checkpoint\n_load_reference\n"
_REF_MAX_BYTES = 1 << 16  # a reference's pickle is ~200 bytes; a checkpoint's is larger


class _FieldsUnpickler(pickle.Unpickler):
    """Unpickles a reference into the call's one argument, a dict; nothing else runs."""

    def find_class(self, module, name):
        if (module, name) == ("saturate.checkpoint", "_load_reference"):
            return dict
        raise pickle.UnpicklingError(f"{module}.{name} in a reference")


def _ref_fields(path: str) -> Optional[Dict[str, Any]]:
    """The fields of the reference file at ``path``, or None when it is not one (a
    torch.save checkpoint, another file, missing)."""
    try:
        with zipfile.ZipFile(path) as z:
            pickles = [i for i in z.infolist() if i.filename.endswith("/data.pkl")]
            if len(pickles) != 1 or pickles[0].file_size > _REF_MAX_BYTES:
                return None
            data = z.read(pickles[0])
    except (OSError, zipfile.BadZipFile, ValueError):
        return None
    if not data.startswith(_REF_PICKLE_HEAD):
        return None
    try:
        fields = _FieldsUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError):
        return None
    return fields if isinstance(fields, dict) and fields.get("format") == _REF_FORMAT else None


def _read_ref(path: str) -> Optional[str]:
    """The checkpoint directory the reference file at ``path`` names (beside it, so that
    a copied or moved directory of checkpoints still resolves), or None."""
    fields = _ref_fields(path)
    if fields is None:
        return None
    return os.path.join(os.path.dirname(os.path.abspath(path)), fields["checkpoint"])


class SaturateCheckpointIO(pl.plugins.CheckpointIO):
    """Lightning's checkpoint I/O through ``saturate.Checkpointer``:
    ``Trainer(plugins=[SaturateCheckpointIO()])``.

    ``save_checkpoint`` returns once the state's tensors are copied into a reusable host
    pool (page-locked for CUDA tensors); a C++ thread writes, fsyncs and commits it, while
    training goes on. The data of a checkpoint Lightning names ``dir/NAME.ckpt`` lives in
    ``dir/.saturate-checkpoints/step-K/`` (saturate's format, checksummed), and
    ``dir/NAME.ckpt`` becomes a small reference file naming it, written (atomically) only
    after that checkpoint committed: a ``.ckpt`` path always names a whole checkpoint, and
    a job killed mid-write keeps its previous ``last.ckpt``.

    ``load_checkpoint`` (``trainer.fit(ckpt_path=...)``, ``"last"`` included) verifies the
    checksums and reads tensors as copy-on-write maps of the files; plain ``torch.save``
    checkpoints load too (a run started without the plugin resumes with it). Overwriting
    or removing a ``.ckpt`` (top-k, ``last.ckpt``) removes the data no other ``.ckpt`` in
    its directory names. ``torch.load`` of a ``.ckpt`` with ``weights_only=False`` (as in
    ``LightningModule.load_from_checkpoint(path, weights_only=False)``) returns the
    checkpoint it names: the reference pickles that call (torch's weights-only default
    refuses it, naming it).

    Also a Fabric plugin (``fabric.save`` / ``fabric.load``); where nothing calls
    ``teardown`` (Fabric, ``trainer.save_checkpoint`` outside fit), the interpreter's exit
    does. Local paths only.

    Args: ``copy_threads``, ``max_in_flight``: as ``saturate.Checkpointer``'s (a save while
    ``max_in_flight`` writes run waits for one). The default, 2, lets the
    ``last.ckpt`` save that ``save_last=True`` makes right after a top-k save go on without
    waiting for the first write, at the cost of a second host buffer the size of the state.
    Thread-safety: Lightning's calls come from the training thread; one helper thread
    publishes the reference files.
    """

    _POLL_S = 0.01  # how often the helper looks at the writer's commit count

    def __init__(self, *, copy_threads: int = 0, max_in_flight: int = 2):
        self.copy_threads, self.max_in_flight = copy_threads, max_in_flight
        self._stores: Dict[str, _Store] = {}  # by directory
        self._pending: List[_Publish] = []  # in save order; the helper publishes them
        self._cv = threading.Condition()
        self._publisher: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None  # the helper's, raised on the next call
        # Fabric's save, or trainer.save_checkpoint outside fit, has no teardown after it:
        # the interpreter's exit waits for the writes and references instead.
        atexit.register(_teardown_at_exit, weakref.ref(self))

    # ---- Lightning's CheckpointIO ----

    def save_checkpoint(self, checkpoint: Dict[str, Any], path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError("SaturateCheckpointIO.save_checkpoint: storage_options is not "
                            f"supported (got {storage_options!r})")
        path = os.fspath(path)
        if "://" in path:
            raise ValueError(f"SaturateCheckpointIO: {path}: local paths only")
        path = os.path.abspath(path)
        self._raise_error()
        dir = os.path.join(os.path.dirname(path), _STORE)
        store = self._stores.get(dir)
        if store is None:
            store = self._stores[dir] = _Store(dir, self.copy_threads, self.max_in_flight)
        step_id = store.next_id
        store.next_id += 1
        store.writer.save(checkpoint, step_id)  # raises an earlier write's failure
        store.saves += 1
        with self._cv:
            step = checkpoint.get("global_step")  # Fabric's state may hold anything there
            self._pending.append(_Publish(store, step_id, path,
                                          step if isinstance(step, int) else None))
            if self._publisher is None:
                self._publisher = threading.Thread(target=self._publish_loop, daemon=True,
                                                   name="saturate-ckpt-publish")
                self._publisher.start()

    def load_checkpoint(self, path, map_location: Any = None, weights_only: Any = None):
        path = os.fspath(path)
        self._wait_published(path)
        target = _read_ref(path)
        if target is None:
            return pl.plugins.TorchCheckpointIO().load_checkpoint(
                path, **({} if map_location is None else {"map_location": map_location}),
                weights_only=weights_only)
        if callable(map_location):
            raise TypeError(f"SaturateCheckpointIO.load_checkpoint: {path}: map_location must "
                            "be a device (or None: where each tensor was saved), not a function")
        if not os.path.isdir(target):
            raise CorruptionError(f"{path}: names {target}, which is missing")
        try:
            return _load_checkpoint(target, map_location)
        except CorruptionError as e:
            raise CorruptionError(f"{path}: {e}") from None

    def remove_checkpoint(self, path) -> None:
        path = os.path.abspath(os.fspath(path))
        self._wait_published(path)
        target = _read_ref(path)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)
        if target is not None:
            self._drop_unreferenced(target)

    def teardown(self) -> None:
        """Waits until every save committed and its reference file is written (Lightning
        calls it at the end of fit); raises a write's failure."""
        writers = [store.writer for store in self._stores.values()]
        try:
            for w in writers:
                w.wait()
            self._wait_published(None)
            self._raise_error()
        finally:
            self._stores = {}
            for w in writers:
                w.close()

    # ---- internals ----

    def _publish_loop(self) -> None:
        while True:
            with self._cv:
                if not self._pending:
                    self._publisher = None  # the next save starts another
                    return
                item = self._pending[0]
            # The engine's counters, the one call its header allows from any thread (the
            # Checkpointer itself is the training thread's).
            stats = item.writer._core.stats()
            if stats["commits"] + stats["failed"] < item.nth:
                time.sleep(self._POLL_S)
                continue
            try:
                if os.path.isdir(item.step_dir):  # committed (failed writes leave no step dir)
                    self._publish(item)
            except OSError as e:  # the reference could not be written: the save is lost
                self._error = self._error or e
            with self._cv:
                self._pending.pop(0)
                self._cv.notify_all()

    def _publish(self, item: _Publish) -> None:
        old = _read_ref(item.path)
        fields = {"format": _REF_FORMAT, "format_version": 2,
                  "checkpoint": os.path.relpath(item.step_dir, os.path.dirname(item.path)),
                  "checkpoint_path": item.step_dir, "global_step": item.global_step}
        data = io.BytesIO()
        torch.save(_Reference(fields), data)
        _write_atomic(item.path, data.getvalue())
        if old is not None and os.path.normpath(old) != os.path.normpath(item.step_dir):
            self._drop_unreferenced(old)

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _wait_published(self, path: Optional[str]) -> None:
        """Until no pending save targets ``path`` (None: none at all)."""
        with self._cv:
            while any(path is None or p.path == os.path.abspath(path) for p in self._pending):
                self._cv.wait()

    @staticmethod
    def _drop_unreferenced(step_dir: str) -> None:
        """Removes a checkpoint's data unless a reference file beside its store names it."""
        step_dir = os.path.normpath(step_dir)
        if os.path.basename(os.path.dirname(step_dir)) != _STORE:
            return  # not data this plugin wrote
        if step_dir not in _referenced(os.path.dirname(os.path.dirname(step_dir))):
            shutil.rmtree(step_dir, ignore_errors=True)


def _teardown_at_exit(ref) -> None:
    plugin = ref()
    if plugin is not None and plugin._stores:
        plugin.teardown()


__all__ = ["SaturateDataModule", "SaturateCallback", "SaturateCheckpointIO"]
