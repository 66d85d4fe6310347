"""saturate with Hugging Face Accelerate (docs/install.md).

    from accelerate import Accelerator
    import saturate.accelerate

    accelerator = Accelerator()
    loader = saturate.accelerate.loader(accelerator, "data/train.sat", batch_size=64)
    model, optimizer = accelerator.prepare(model, optimizer)   # not the loader: see below
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:                                    # this process's shard
            ...
    accelerator.save_state("ckpt")                              # the loader's position too

What Accelerate does with a ``saturate.Loader``: ``accelerator.prepare`` returns it as it
is (it wraps only torch DataLoaders), so it never re-shards or re-places its batches;
passing it through prepare is harmless. The loader shards by itself: created after
``Accelerator()``, it takes rank and world size from torch.distributed, which Accelerate
has started (``accelerate launch``, torchrun, Slurm); this module passes them explicitly.

Accelerate's ``save_state`` writes a registered object's state from the main process
only, so every rank restores rank 0's state. That is right: all ranks of a data-parallel
job are at the same batch, and ``Loader.load_state_dict`` restores any rank's state into
this rank's shard at that position; with another number of processes it resumes
elastically (docs/loader.md). ``loader()`` registers the loader's position for it.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Union

from .loader import Loader


class _Position:
    """A loader's position for ``accelerator.register_for_checkpointing``: the main
    process's state, restored into this rank's shard (elastically when the number of
    processes changed)."""

    def __init__(self, loader: Loader):
        self.loader = loader

    def state_dict(self) -> Dict[str, int]:
        return dict(self.loader.state_dict())

    def load_state_dict(self, state: Dict[str, int]) -> None:
        self.loader.load_state_dict(dict(state))


def loader(accelerator: Any, dataset: Union[str, os.PathLike], batch_size: int = 32,
           *, checkpoint: bool = True, **loader_args: Any) -> Loader:
    """A ``saturate.Loader`` for this process of ``accelerator``.

    Its shard is ``accelerator.process_index`` of ``accelerator.num_processes``; on a CUDA
    accelerator its batches arrive in that GPU's memory (``device``, unless given). With
    ``checkpoint`` (the default) its position is registered for
    ``accelerator.save_state`` / ``load_state``. Other arguments go to ``saturate.Loader``.
    """
    loader_args.setdefault("rank", accelerator.process_index)
    loader_args.setdefault("world_size", accelerator.num_processes)
    device = accelerator.device
    if "device" not in loader_args and getattr(device, "type", "cpu") == "cuda":
        index = device.index if device.index is not None else 0
        loader_args["device"] = f"cuda:{index}"
    made = Loader(dataset, batch_size, **loader_args)
    if checkpoint:
        accelerator.register_for_checkpointing(_Position(made))
    return made


__all__ = ["loader"]
