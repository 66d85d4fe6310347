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

The callback marks forward, backward and optimizer spans and one ``saturate.step()`` per
optimizer update, which ``saturate doctor`` reads; the loader records its own waits.
Spans are recorded under ``saturate doctor``/``watch`` (SATURATE_RUN_DIR) or into
``run_dir``. Works with ``lightning`` (``lightning.pytorch``) or ``pytorch_lightning``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

try:
    import lightning.pytorch as pl
except ImportError:  # the older, separate package
    try:
        import pytorch_lightning as pl
    except ImportError as e:
        raise ImportError(
            "saturate.lightning needs PyTorch Lightning: pip install lightning") from e

from . import _trace
from ._watch import watch as _watch
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


__all__ = ["SaturateDataModule", "SaturateCallback"]
