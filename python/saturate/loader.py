"""saturate.Loader: the C++ input pipeline as a Python iterable of batches.

A drop-in for ``torch.utils.data.DataLoader`` over a packed dataset::

    loader = saturate.Loader("data/train.sat", batch_size=64, shuffle=True, seed=0,
                             transforms={"image": [T.RandomResizedCrop(224),
                                                   T.RandomHorizontalFlip()]})
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            x, y = batch["image"], batch["label"]

Lifetime rule (zero-copy): a batch's large tensors (images, arrays: 16 KiB
and up) view the loader's batch buffer directly, without a copy. The buffer
goes back to the loader's pool when the last tensor (or view of one) of that
batch is released, and only then is it reused, so a batch you hold is never
overwritten. The pool has room for ``prefetch + max_held_batches`` batches;
holding more than ``max_held_batches`` batches' large tensors at once raises
an error instead of blocking (``.clone()`` what you keep for longer, or raise
the limit). Small tensors (labels, lengths) are copies: keep them freely.

On a GPU (``device="cuda"``) the workers decode and crop into pinned memory,
the batch is copied on a side stream with the uint8 pixels, and the dtype,
normalize and layout steps run as GPU kernels. Every tensor of the batch is
then a view of a pooled device buffer (labels too: ``.clone()`` what you keep)
and is ready on ``torch.cuda.current_stream()`` at the time it was yielded;
releasing it lets the buffer be reused only after the work queued on that stream.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

from . import _core, _progress
from .transforms import field_spec

_FRAMEWORKS = {
    "torch": _core.Framework.torch,
    "numpy": _core.Framework.numpy,
    "jax": _core.Framework.jax,
    "dlpack": _core.Framework.dlpack,
}


def _auto(name: str, value: Union[int, str, None]) -> int:
    """ "auto" or None -> 0 (the engine's auto), else a positive int."""
    if value is None or value == "auto":
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: {value!r} (use a positive int or 'auto')")
    return value


def _tuned(name: str, value: Union[int, str]) -> Union[int, str]:
    """``value``, unless ``saturate tune`` is running this trial with SATURATE_TUNE_<NAME>
    set: the trial's setting wins, so a script tunes without being edited."""
    text = os.environ.get(f"SATURATE_TUNE_{name.upper()}")
    if not text:
        return value
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"SATURATE_TUNE_{name.upper()}={text!r}: use a positive int or 'auto'")


def _distributed_rank() -> tuple[Optional[int], Optional[int]]:
    """(rank, world_size) from torch.distributed when it is initialized, else (None, None).

    None lets the engine read RANK/WORLD_SIZE (torchrun) or SLURM_PROCID/SLURM_STEP_NUM_TASKS (inside srun).
    """
    torch = sys.modules.get("torch")  # never import torch for this
    if torch is None:
        return None, None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None, None
    return dist.get_rank(), dist.get_world_size()


class Loader:
    """Batches of a saturate dataset, decoded and augmented in C++ threads.

    Args:
      dataset: a directory written by ``saturate pack`` / :func:`saturate.pack`; or WebDataset
        tar shards / TFRecord files read where they lie (``"laion-{000..009}.tar"``,
        ``"train-*.tfrecord"``; a sidecar index is built on first use; docs/formats.md), in a
        bucket too (``"s3://bucket/laion/{00000..00999}.tar"``; docs/remote.md).
      batch_size: samples per batch.
      shuffle, seed: a new permutation each epoch, from (seed, epoch). ``shuffle="block"``
        shuffles ~4 MiB blocks of neighbouring records, then records within windows of 16
        blocks: for remote datasets, whose neighbours are fetched together (docs/remote.md).
        Resume stays exact.
      drop_last: drop the epoch's last, incomplete batch.
      rank, world_size: data-parallel sharding. Default: torch.distributed when
        initialized, else RANK/WORLD_SIZE (torchrun), SLURM_PROCID/SLURM_STEP_NUM_TASKS (inside srun), else 1 rank.
      drop_uneven: ranks drop the tail (True) or pad by repeating samples (False,
        as DistributedSampler does), so every rank has the same number of batches.
      threads, prefetch: a positive int or "auto" (autotuned while running). Under
        ``saturate tune``, SATURATE_TUNE_THREADS / SATURATE_TUNE_PREFETCH override them.
      transforms: ``{field: transform}``; see :mod:`saturate.transforms`.
      framework: "torch", "numpy", "jax" or "dlpack" (objects with ``__dlpack__``).
      max_held_batches: batches you may keep alive at once (see the lifetime rule).
      skip_bad: drop samples that fail to decode (counted in ``stats()``) instead of raising.
      ram_cap_bytes: autotuning keeps the batch pool under this (0: RAM / 10).
      device: "cpu", or "cuda" / "cuda:N" to receive batches in GPU memory (see the
        module docs); raises saturate.errors.UnavailableError where there is no GPU.
      device_prefetch: batches copied to the GPU ahead of the one being used.
      decode: where JPEGs are decoded with a CUDA device: "cpu" (the loader's threads),
        "gpu" (nvJPEG, the hardware engine where present; raises UnavailableError naming
        libnvjpeg where it cannot be loaded) or "auto" (split between the threads and the
        GPU by measured rates; the CPU alone without nvJPEG). Samples, labels and crops are
        the CPU path's; GPU-decoded pixels differ by a few levels (docs/gpu.md). ``stats()``
        shows the split (``gpu_decode_fraction``, ``gpu_decoded``, ``decode_backend``).
      endpoint: remote datasets (``s3://bucket/prefix``, ``http(s)://...``): the S3 endpoint
        (default ``AWS_ENDPOINT_URL``, else AWS). See docs/remote.md.
      cache_dir: a local directory that keeps fetched shard blocks (default
        ``SATURATE_CACHE_DIR``; none: every epoch fetches again). Safe to share between the
        ranks of a node.
      cache_bytes: the cache's byte budget (default ``SATURATE_CACHE_BYTES``, else half the
        free space, at most 64 GiB); least recently used blocks go first.
      readahead_bytes: how far ahead of the reads fetching may go (0: 64 MiB).
      remote_requests: concurrent requests (0: 8).
    """

    def __init__(
        self,
        dataset: Union[str, os.PathLike],
        batch_size: int = 32,
        *,
        shuffle: Union[bool, str] = True,
        seed: int = 0,
        drop_last: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        drop_uneven: bool = False,
        threads: Union[int, str] = "auto",
        prefetch: Union[int, str] = "auto",
        transforms: Optional[Mapping[str, Any]] = None,
        framework: str = "torch",
        max_held_batches: int = 2,
        skip_bad: bool = False,
        ram_cap_bytes: int = 0,
        device: str = "cpu",
        device_prefetch: int = 2,
        endpoint: Optional[str] = None,
        cache_dir: Optional[Union[str, os.PathLike]] = None,
        cache_bytes: int = 0,
        readahead_bytes: int = 0,
        remote_requests: int = 0,
        decode: str = "cpu",
    ):
        if framework not in _FRAMEWORKS:
            raise ValueError(f"framework: {framework!r} (use one of {', '.join(_FRAMEWORKS)})")
        if device != "cpu" and framework == "numpy":
            raise ValueError(f"framework='numpy' cannot hold {device} tensors; use torch, jax or dlpack")
        if decode not in ("cpu", "gpu", "auto"):
            raise ValueError(f"decode: {decode!r} (use 'cpu', 'gpu' or 'auto')")
        if decode == "gpu" and device == "cpu":
            raise ValueError("decode='gpu' needs device='cuda' (a host loader decodes on the CPU)")
        if framework in ("torch", "jax"):
            __import__(framework)  # a clear ImportError now, not at the first batch
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size: {batch_size!r} (use a positive int)")
        if shuffle not in (True, False, "block"):
            raise ValueError(f"shuffle: {shuffle!r} (use True, False or 'block')")
        block_shuffle = shuffle == "block"
        if rank is None and world_size is None:
            rank, world_size = _distributed_rank()
        self._framework = _FRAMEWORKS[framework]
        # WebDataset / TFRecord files get their JPEG tables on first open: a bar on a
        # terminal, drawn by the process that makes them (the index lock lets one rank of a
        # node do it while the others wait; docs/formats.md).
        bar = _progress.Bar("indexing JPEGs", "image")
        self._core = _core.Loader(
            dataset=os.fspath(dataset),
            batch_size=batch_size,
            shuffle=bool(shuffle),
            seed=seed,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            drop_uneven=drop_uneven,
            threads=_auto("threads", _tuned("threads", threads)),
            prefetch=_auto("prefetch", _tuned("prefetch", prefetch)),
            ram_cap_bytes=ram_cap_bytes,
            max_held_batches=max_held_batches,
            skip_bad=skip_bad,
            transforms=[field_spec(f, t) for f, t in (transforms or {}).items()],
            device=device,
            device_prefetch=device_prefetch,
            endpoint=endpoint or "",
            cache_dir=os.fspath(cache_dir) if cache_dir is not None else "",
            cache_bytes=cache_bytes,
            readahead_bytes=readahead_bytes,
            remote_requests=remote_requests,
            block_shuffle=block_shuffle,
            decode=decode,
            open_progress=bar if sys.stderr.isatty() else None,
        )
        bar.finish()
        self._device = device
        self._epoch = 0
        self._done = 0  # batches of self._epoch delivered

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return self._core.batches_per_epoch

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        """The rest of the current epoch. When it ends, the loader moves on to the
        next epoch (and starts preparing it), so forgetting set_epoch() never
        repeats an epoch's order; breaking out and iterating again continues."""
        core_next, framework, stream = self._core.next, self._framework, self._stream
        while (tensors := core_next(framework, stream=stream())) is not None:
            self._done += 1
            yield tensors
        self.set_epoch(self._epoch + 1)

    def _stream(self) -> int:
        """The cudaStream_t the next batch must be ready on: torch's current stream on
        our device when torch is in use, else the default stream (0)."""
        if self._device == "cpu":
            return 0
        torch = sys.modules.get("torch")
        if torch is None:
            return 0
        return torch.cuda.current_stream(self._core.device_index).cuda_stream

    @property
    def device(self) -> str:
        return self._device

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch (its order comes from (seed, epoch)).

        As DistributedSampler.set_epoch, calling it with the current epoch changes
        nothing: a loop that calls ``set_epoch(epoch)`` at the top of every epoch
        keeps the batches prepared ahead, and resumes right after load_state_dict.
        """
        if epoch == self._epoch:
            return
        self._core.set_epoch(epoch)
        self._epoch, self._done = epoch, 0

    @property
    def epoch(self) -> int:
        return self._epoch

    def state_dict(self) -> Dict[str, int]:
        """Where the loader stands: plain ints, safe to torch.save or json.dump.

        As torchdata's StatefulDataLoader: after ``load_state_dict`` (in this or a
        new process) iteration continues with the batch after the last one
        delivered, byte for byte as the uninterrupted run, without re-decoding
        anything before it.

        A state saved with another world size or batch size resumes elastically:
        the epoch goes on from the first sample no rank had read, split across
        this run's ranks (that epoch is shorter; docs/loader.md).
        """
        return json.loads(self._core.state_json())

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self._core.restore_json(json.dumps(dict(state)))
        now = self.state_dict()  # an elastic resume may start elsewhere
        self._epoch, self._done = int(now["epoch"]), int(now["batches_done"])

    def stats(self) -> Dict[str, Any]:
        """Per-stage counters since start: samples, skipped, read/decode/transform
        nanoseconds (summed over threads), batches, the consumer's ``wait_ns``, and the
        current threads/prefetch (the autotuner may change them). With ``device="cuda"`` also
        ``h2d_bytes`` and ``h2d_batches`` copied to the GPU and ``device_buffers`` allocated
        there (constant once the pool is full)."""
        return self._core.stats()

    @property
    def batch_bytes(self) -> int:
        """Bytes of one batch buffer."""
        return self._core.batch_bytes

    @property
    def rank(self) -> int:
        return self._core.rank

    @property
    def world_size(self) -> int:
        return self._core.world_size

    @property
    def class_names(self) -> List[str]:
        """The dataset's class names (label i is ``class_names[i]``); empty when it has none."""
        return list(self._core.class_names)

    def _next_with_info(self):
        """(tensors, info) or None at the epoch's end; for tests: info holds the
        C++ buffer addresses."""
        item = self._core.next(self._framework, with_info=True, stream=self._stream())
        if item is not None:
            self._done += 1
        return item
