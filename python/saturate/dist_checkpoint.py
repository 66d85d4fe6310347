"""saturate.dist_checkpoint: sharded checkpoints saved from every rank at once
(docs/checkpoint.md, "Sharded checkpoints across ranks").

    import torch.distributed as dist
    from saturate import dist_checkpoint as dcp_sat

    dist.init_process_group("gloo")                       # or nccl; torchrun sets the rest
    ckpt = dcp_sat.DistCheckpointer("ckpt", keep=3)       # every rank, same dir
    state = {"model": model.state_dict(), "step": 0}      # DTensor / ShardedTensor / plain
    if dcp_sat.list_checkpoints("ckpt"):
        state = dcp_sat.load("ckpt", state)               # in place, resharded to this world
    for step in range(...):
        ...
        ckpt.save({"model": model.state_dict(), "step": step}, step)   # returns after the snapshot
    ckpt.close()                                          # waits for the global commit

Each rank snapshots only what it writes into the C++ engine's host pool
(saturate.Checkpointer's hot path: the copy and the background write + fsync
never take the GIL) and commits ``dir/rank-R/step-N/`` atomically. What a
rank writes: its local shards of DTensors and ShardedTensors, its
:class:`Shard` pieces, and the replicated (plain) tensors that
:func:`assign_owners` gives it, so each replicated tensor is written once.
Rank 0 runs a coordinator thread that waits until every rank's directory of
that save is committed (so fsynced), then writes the global manifest
``dir/step-N.manifest.json`` last (temp file, fsync, rename, fsync of dir).
A crash at any point leaves the previous global manifest, and every file it
names, untouched, so the previous checkpoint loads.

Loading re-cuts slices: each tensor's manifest entry lists its pieces
(rank directory, byte offset, global offsets, lengths); a target slice is
filled from the pieces it intersects (:func:`intersect`), at any world size,
or whole in one process (``load(dir)``). :func:`to_dcp` / :func:`from_dcp`
convert to and from torch.distributed.checkpoint's on-disk layout.

Spans (category ``checkpoint``, into the run directory when tracing is on):
``checkpoint_save`` on each rank's training thread (the C++ engine nests
``checkpoint_snapshot`` in it and records ``checkpoint_write`` on its writer
thread); on rank 0's coordinator thread ``checkpoint_wait_rank<R>`` while it
waits for rank R's files and ``checkpoint_commit`` for the manifest; on every
rank ``checkpoint_wait_commit`` when ``wait()`` waits for the global commit.

Thread-safety: one thread per rank uses a DistCheckpointer (the training
loop); the coordinator thread is internal. Errors are saturate.errors
exceptions; the library never prints.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import pickle
import queue
import re
import sys
import threading
import time
import uuid
import warnings
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from . import _core
from .checkpoint import (CheckpointWarning, _Deferred, _DeviceStaging, _Job, _fetch_verified,
                         _guard_optimizers, _guarded_storages, _is_guarded, _is_remote)
from .errors import (CorruptionError, InternalError, InvalidArgumentError, NotFoundError,
                     UnavailableError, UnimplementedError)

__all__ = ["DistCheckpointer", "Shard", "load", "latest", "list_checkpoints", "assign_owners",
           "intersect", "shard_extent", "to_dcp", "from_dcp"]

FORMAT = "saturate-dist-checkpoint"
FORMAT_VERSION = 1
_RANK_FORMAT = "saturate-dist-rank"
_TAG = "saturate.dist"
_MANIFEST_RE = re.compile(r"^step-(0|[1-9][0-9]*)\.manifest\.json$")
_STEP_RE = re.compile(r"^step-(0|[1-9][0-9]*)$")
_KEEP_ALL = 2**31 - 1  # the engine's own retention is off: the coordinator does it
_POLL_MAX_S = 0.02
_POLL_MAX_REMOTE_S = 0.2  # s3://: polling is a GET request
_FAILED = "commit-failed.json"  # rank 0's last failed commit, for the other ranks' wait()


# ---------------------------------------------------------------------------
# Pure functions (unit-tested in python/tests/test_dist_checkpoint.py)
# ---------------------------------------------------------------------------


def assign_owners(sizes: Sequence[Tuple[str, int]], world_size: int) -> Dict[str, int]:
    """Which rank writes each replicated tensor: largest first, each to the rank
    with the fewest bytes so far (ties: the lower rank). Depends only on the
    (name, bytes) pairs, so every rank computes the same answer alone."""
    if world_size < 1:
        raise InvalidArgumentError(f"world_size must be >= 1, got {world_size}")
    load = [0] * world_size
    out: Dict[str, int] = {}
    for name, nbytes in sorted(sizes, key=lambda x: (-int(x[1]), x[0])):
        r = min(range(world_size), key=lambda i: (load[i], i))
        out[name] = r
        load[r] += int(nbytes)
    return out


def intersect(a_offsets: Sequence[int], a_lengths: Sequence[int], b_offsets: Sequence[int],
              b_lengths: Sequence[int]) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    """The box two boxes (global offsets, lengths) share, or None when empty.
    0-d boxes (scalars) always intersect in the empty tuple."""
    if not (len(a_offsets) == len(a_lengths) == len(b_offsets) == len(b_lengths)):
        raise InvalidArgumentError("boxes of different ranks")
    offs, lens = [], []
    for ao, al, bo, bl in zip(a_offsets, a_lengths, b_offsets, b_lengths):
        lo, hi = max(ao, bo), min(ao + al, bo + bl)
        if hi <= lo:
            return None
        offs.append(lo)
        lens.append(hi - lo)
    return tuple(offs), tuple(lens)


def shard_extent(global_shape: Sequence[int], mesh_shape: Sequence[int],
                 coordinate: Sequence[int], placements: Sequence[Tuple]) -> Tuple[List[int], List[int]]:
    """(global offsets, lengths) of a mesh coordinate's local piece. Placements,
    one per mesh dim: ("shard", tensor_dim) or ("replicate",). Shard splits as
    torch.chunk does (DTensor's rule): ceil(n / k) per chunk, the last ones
    shorter or empty; several mesh dims on one tensor dim split in mesh order."""
    offsets = [0] * len(global_shape)
    lengths = list(global_shape)
    for mesh_dim, p in enumerate(placements):
        if p[0] == "replicate":
            continue
        if p[0] != "shard":
            raise UnimplementedError(f"placement {p!r} (only shard and replicate are saved)")
        d, k, c = p[1], mesh_shape[mesh_dim], coordinate[mesh_dim]
        n = lengths[d]
        chunk = -(-n // k) if n else 0
        start = min(c * chunk, n)
        stop = min(start + chunk, n)
        offsets[d] += start
        lengths[d] = stop - start
    return offsets, lengths


def _volume(lengths: Iterable[int]) -> int:
    v = 1
    for n in lengths:
        v *= int(n)
    return v


# ---------------------------------------------------------------------------
# What a state holds
# ---------------------------------------------------------------------------


class Shard:
    """A rank's piece of a global tensor, for states without DTensor: ``tensor``
    holds global[offsets[0]:offsets[0]+tensor.shape[0], ...] of a tensor of
    ``global_shape``. Saved pieces of all ranks must tile the global tensor.
    At load, ``tensor`` is filled in place from whatever pieces it intersects."""

    def __init__(self, tensor, offsets: Sequence[int], global_shape: Sequence[int]):
        self.tensor = tensor
        self.offsets = [int(x) for x in offsets]
        self.global_shape = [int(x) for x in global_shape]
        if len(self.offsets) != len(self.global_shape) or len(self.offsets) != tensor.dim():
            raise InvalidArgumentError(
                f"Shard: offsets {self.offsets}, global_shape {self.global_shape} and the "
                f"tensor's shape {list(tensor.shape)} must have the same length")
        for o, n, g in zip(self.offsets, tensor.shape, self.global_shape):
            if o < 0 or o + n > g:
                raise InvalidArgumentError(
                    f"Shard: piece at {self.offsets} of shape {list(tensor.shape)} is outside "
                    f"{self.global_shape}")

    def __repr__(self) -> str:
        return f"Shard(offsets={self.offsets}, global_shape={self.global_shape}, shape={list(self.tensor.shape)})"


def _torch():
    import torch

    return torch


def _dtensor_class():
    """DTensor when the program imported it (a state cannot hold one otherwise)."""
    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        cls = getattr(sys.modules.get(name), "DTensor", None)
        if cls is not None:
            return cls
    return None


def _sharded_tensor_class():
    """ShardedTensor when the program imported it."""
    return getattr(sys.modules.get("torch.distributed._shard.sharded_tensor"), "ShardedTensor", None)


class _Item:
    """One tensor of the state as this rank sees it."""

    __slots__ = ("fqn", "kind", "dtype", "global_shape", "pieces", "replicated", "parameter",
                 "requires_grad", "device", "obj", "mesh_owner")

    def __init__(self, fqn, kind, dtype, global_shape, pieces, replicated, obj, device="cpu",
                 parameter=False, requires_grad=False, mesh_owner=True):
        self.fqn, self.kind, self.dtype = fqn, kind, dtype
        self.global_shape = [int(x) for x in global_shape]
        self.pieces = pieces  # [(offsets, lengths, local tensor or None)]
        self.replicated = replicated  # the same whole tensor on every rank
        self.obj, self.device = obj, device
        self.parameter, self.requires_grad = parameter, requires_grad
        self.mesh_owner = mesh_owner  # DTensor partly replicated: this rank writes its piece


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _dtensor_extent(dt) -> Tuple[List[int], List[int], bool]:
    """(offsets, lengths, writer) of this rank's DTensor piece; writer: this rank
    is coordinate 0 on every replicated mesh dim (so each piece is written once)."""
    mesh = dt.device_mesh
    coord = mesh.get_coordinate()
    if coord is None:  # this rank is not in the mesh: it holds nothing
        return [0] * dt.dim(), [0] * dt.dim(), False
    placements = []
    writer = True
    for i, p in enumerate(dt.placements):
        if p.is_shard():
            placements.append(("shard", p.dim if p.dim >= 0 else p.dim + dt.dim()))
        elif p.is_replicate():
            placements.append(("replicate",))
            writer = writer and coord[i] == 0
        else:
            raise UnimplementedError(
                f"DTensor placement {p} cannot be saved: redistribute it to Shard or Replicate")
    offsets, lengths = shard_extent(list(dt.shape), list(mesh.shape), list(coord), placements)
    local = dt.to_local()
    if list(local.shape) != lengths:
        raise UnimplementedError(
            f"DTensor local shape {list(local.shape)} differs from the chunk rule's {lengths} "
            "(uneven sharding other than torch.chunk's is not supported)")
    return offsets, lengths, writer


def _classify(obj, fqn: str) -> Optional[_Item]:
    """An _Item for a tensor-like leaf, None for anything else."""
    torch = _torch()
    if isinstance(obj, Shard):
        t = obj.tensor
        return _Item(fqn, "shard", _dtype_name(t.dtype), obj.global_shape,
                     [(obj.offsets, list(t.shape), t)], False, obj, device=str(t.device))
    DTensor = _dtensor_class()
    if DTensor is not None and isinstance(obj, DTensor):
        offsets, lengths, writer = _dtensor_extent(obj)
        fully_replicated = all(p.is_replicate() for p in obj.placements)
        local = obj.to_local()
        return _Item(fqn, "dtensor", _dtype_name(obj.dtype), list(obj.shape),
                     [(offsets, lengths, local)], fully_replicated, obj, device=str(local.device),
                     requires_grad=bool(obj.requires_grad), mesh_owner=writer)
    ShardedTensor = _sharded_tensor_class()
    if ShardedTensor is not None and isinstance(obj, ShardedTensor):
        pieces = [(list(s.metadata.shard_offsets), list(s.metadata.shard_sizes), s.tensor)
                  for s in obj.local_shards()]
        dtype = obj.metadata().tensor_properties.dtype
        return _Item(fqn, "sharded_tensor", _dtype_name(dtype), list(obj.size()), pieces, False,
                     obj)
    if isinstance(obj, torch.Tensor) and obj.layout == torch.strided and not obj.is_quantized:
        return _Item(fqn, "tensor", _dtype_name(obj.dtype), list(obj.shape),
                     [([0] * obj.dim(), list(obj.shape), obj)], True, obj, device=str(obj.device),
                     parameter=isinstance(obj, torch.nn.Parameter),
                     requires_grad=bool(obj.requires_grad))
    if isinstance(obj, np.ndarray) and not obj.dtype.hasobject:
        t = torch.from_numpy(np.ascontiguousarray(obj))
        return _Item(fqn, "numpy", obj.dtype.str, list(obj.shape),
                     [([0] * obj.ndim, list(obj.shape), t)], True, obj)
    return None


def _walk(state, prefix: str, out: Dict[str, _Item], ids: Dict[int, str]) -> None:
    """fqn ("model/fc.weight", the path in the structure) -> _Item for every
    tensor-like leaf; the same object reached twice is one item."""
    if isinstance(state, dict):
        items = [(str(k), v) for k, v in state.items()]
    elif isinstance(state, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(state)]
    else:
        if id(state) in ids:
            return
        item = _classify(state, prefix or "tensor")
        if item is not None:
            if item.fqn in out:
                raise InvalidArgumentError(f"two tensors have the path {item.fqn!r}")
            out[item.fqn] = item
            ids[id(state)] = item.fqn
        return
    for key, value in items:
        _walk(value, f"{prefix}/{key}" if prefix else key, out, ids)


def _collect(state) -> Tuple[Dict[str, _Item], Dict[int, str]]:
    items: Dict[str, _Item] = {}
    ids: Dict[int, str] = {}
    _walk(state, "", items, ids)
    return items, ids


class _StructurePickler(pickle.Pickler):
    """The state with each tensor-like replaced by ("saturate.dist", fqn)."""

    def __init__(self, file, ids: Dict[int, str]):
        super().__init__(file, protocol=4)
        self.ids = ids

    def persistent_id(self, obj):
        fqn = self.ids.get(id(obj))
        return None if fqn is None else (_TAG, fqn)


def _structure_bytes(state, ids: Dict[int, str]) -> bytes:
    import io

    buf = io.BytesIO()
    _StructurePickler(buf, ids).dump(state)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------


# A checkpoint location is a directory or an s3:// URL. The helpers below take
# the location and a name relative to it ("step-3.manifest.json",
# "rank-1/step-3/manifest.json") and do the local or the remote thing.

_STORES: Dict[Tuple[str, str], Any] = {}
_ENDPOINTS: Dict[str, str] = {}  # location -> endpoint given to DistCheckpointer / load


def _store(dir: str):
    key = (dir, _ENDPOINTS.get(dir, ""))
    store = _STORES.get(key)
    if store is None:
        store = _STORES[key] = _core.ObjectStore(dir, key[1])
    return store


def _read(dir: str, name: str) -> Optional[bytes]:
    """The bytes of ``name``, None when it does not exist."""
    if _is_remote(dir):
        try:
            return _store(dir).get(name)
        except NotFoundError:
            return None
    try:
        with open(os.path.join(dir, name), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _write(dir: str, name: str, data: bytes) -> None:
    """Replaces ``name`` atomically (a PUT; locally temp file, fsync, rename, fsync)."""
    if _is_remote(dir):
        _store(dir).put(name, data)
    else:
        _write_atomic(os.path.join(dir, name), data)


def _names(dir: str) -> List[str]:
    """Remote: every object name under the location; local: the top-level entries."""
    if _is_remote(dir):
        return _store(dir).list()
    return os.listdir(dir) if os.path.isdir(dir) else []


def _poll_max_s(dir: str) -> float:
    return _POLL_MAX_REMOTE_S if _is_remote(dir) else _POLL_MAX_S


def _split(path: str) -> Tuple[str, str]:
    """("s3://b/p", "step-3.manifest.json") from "s3://b/p/step-3.manifest.json"."""
    return os.path.dirname(path), os.path.basename(path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _canonical(body: Dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _write_atomic(path: str, data: bytes) -> None:
    """temp file, fsync, rename over ``path``, fsync of the directory."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def _manifest_path(dir: str, step: int) -> str:
    return os.path.join(dir, f"step-{step}.manifest.json")


def _read_rank(dir: str, rel: str) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
    """(engine manifest.json, rank metadata) of the committed rank directory
    ``rel`` ("rank-1/step-3") of location ``dir``, or None while it is not
    there. Remote: also None while the metadata object is not the one the
    manifest lists (a re-save of the step replacing it)."""
    text = _read(dir, f"{rel}/manifest.json")
    if text is None:
        return None
    manifest = json.loads(text)
    data = _read(dir, f"{rel}/{manifest['metadata_file']}")
    if data is None:
        return None
    if _is_remote(dir):
        want = [f["xxh3"] for f in manifest["files"] if f["name"] == manifest["metadata_file"]]
        if [_core.xxh3_hex(np.frombuffer(data, np.uint8))] != want:
            return None
    return manifest, pickle.loads(data)


def list_checkpoints(dir: str) -> List[Tuple[int, str]]:
    """Globally committed checkpoints (step, manifest path), newest first (not verified)."""
    dir = dir.rstrip("/") if _is_remote(dir) else dir
    out = []
    for name in _names(dir):
        m = _MANIFEST_RE.match(name)
        if m:
            out.append((int(m.group(1)), os.path.join(dir, name)))
    return sorted(out, reverse=True)


def _read_manifest(path: str) -> Dict[str, Any]:
    text = _read(*_split(path))
    if text is None:
        raise NotFoundError(f"{path}: no such checkpoint manifest")
    try:
        m = json.loads(text)
    except ValueError as e:
        raise CorruptionError(f"{path}: not JSON ({e})") from None
    if m.get("format") != FORMAT or m.get("format_version") != FORMAT_VERSION:
        raise CorruptionError(f"{path}: not a {FORMAT} v{FORMAT_VERSION} manifest")
    want = m.pop("sha256", None)
    if hashlib.sha256(_canonical(m)).hexdigest() != want:
        raise CorruptionError(f"{path}: manifest checksum mismatch")
    return m


def _verify(dir: str, m: Dict[str, Any]) -> None:
    """Every rank directory the manifest names verifies (sizes and XXH3 of every
    file) and is the one the manifest was written for. Remote: each rank's
    manifest verifies (its own checksum) and every file it lists exists; the
    files' sizes and XXH3 are checked when a rank downloads them to load."""
    if _is_remote(dir):
        names = set(_names(dir))
        for r in m["ranks"]:
            key = f"{r['dir']}/manifest.json"
            text = _read(dir, key)
            if text is None:
                raise CorruptionError(f"{dir}/{key}: missing")
            rm = _core.checkpoint_parse_manifest(text, f"{dir}/{key}")
            got = json.loads(text).get("xxh3")
            if got != r["manifest_xxh3"]:
                raise CorruptionError(f"{dir}/{r['dir']}: replaced after the global commit "
                                      f"(manifest xxh3 {got}, expected {r['manifest_xxh3']})")
            for f in rm["files"]:
                if f"{r['dir']}/{f['name']}" not in names:
                    raise CorruptionError(f"{dir}/{r['dir']}/{f['name']}: missing")
        return
    for r in m["ranks"]:
        path = os.path.join(dir, r["dir"])
        try:
            _core.checkpoint_verify(path)
        except Exception as e:  # CorruptionError, NotFoundError, IOError from the engine
            raise CorruptionError(f"{path}: {e}") from None
        with open(os.path.join(path, "manifest.json"), "rb") as f:
            got = json.loads(f.read()).get("xxh3")
        if got != r["manifest_xxh3"]:
            raise CorruptionError(f"{path}: replaced after the global commit (manifest "
                                  f"xxh3 {got}, expected {r['manifest_xxh3']})")


def latest(dir: str, *, verify: bool = True) -> Optional[Dict[str, Any]]:
    """The newest global manifest (a dict, plus "path") whose files verify, or
    None when there is none. Skipped ones become CheckpointWarnings; committed
    checkpoints that all fail raise CorruptionError."""
    found = list_checkpoints(dir)
    reasons = []
    for step, path in found:
        try:
            m = _read_manifest(path)
            if verify:
                _verify(dir, m)
        except (CorruptionError, OSError, KeyError, TypeError) as e:
            reasons.append(f"{path}: {e}")
            warnings.warn(f"saturate checkpoint: skipped {path}: {e}", CheckpointWarning,
                          stacklevel=2)
            continue
        m["path"] = path
        return m
    if found:
        raise CorruptionError("no checkpoint in " + dir + " verifies: " + "; ".join(reasons))
    return None


# ---------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------


class _Span:
    """A ``checkpoint`` span tagged with its save (step, seq) and, for the
    coordinator's waits, the rank waited for: doctor lines up one save's
    spans across ranks by these (src/doctor/checkpoint_ranks.h)."""

    def __init__(self, name: str, step: int, seq: int, rank: int = -1):
        self.args = (name, step, seq, rank)

    def __enter__(self):
        self.start = _core.trace_now_ns()
        return self

    def __exit__(self, *exc):
        name, step, seq, rank = self.args
        _core.checkpoint_span(name, self.start, _core.trace_now_ns(), step, seq, rank)


def _dist():
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


class DistCheckpointer:
    """Saves a sharded checkpoint from every rank of the process group into ``dir``.

    Args:
      dir: the checkpoint directory, the same path on every rank (a shared file
        system across nodes).
      keep: globally committed checkpoints kept (rank 0 removes older ones).
      process_group: the torch.distributed group (default: the default group;
        without torch.distributed initialized: one rank).
      max_in_flight, copy_threads: as saturate.Checkpointer, per rank (a save
        waits while max_in_flight of this rank's saves are writing: there is no
        on_busy="skip", a step skipped by one rank could never commit);
        copy_threads 0: this machine's cores over its ranks (LOCAL_WORLD_SIZE),
        1 to 4, so ranks copying at once do not oversubscribe the cores.
      commit_timeout_s: how long rank 0 waits for a rank's files before the
        save fails (raised by the next save, wait or close).
      endpoint, multipart_threshold_bytes, part_bytes: for an s3:// ``dir``
        (see saturate.Checkpointer): each rank uploads its files straight from
        its snapshot, rank 0 writes the global manifest object last.

    The constructor is collective (one broadcast of a session id); ``save``
    and ``wait`` are not: every rank calls them with the same steps in the
    same order, but no rank waits for another inside ``save``.
    """

    def __init__(self, dir: str, keep: int = 3, *, process_group=None, max_in_flight: int = 1,
                 copy_threads: int = 0, commit_timeout_s: float = 600.0,
                 endpoint: Optional[str] = None, multipart_threshold_bytes: int = 0,
                 part_bytes: int = 0):
        if keep < 1:
            raise InvalidArgumentError(f"keep must be >= 1, got {keep}")
        self.remote = _is_remote(dir)
        self.dir = dir.rstrip("/") if self.remote else os.path.abspath(os.fspath(dir))
        if self.remote and endpoint:
            _ENDPOINTS[self.dir] = endpoint
        self.keep = int(keep)
        dist = _dist()
        self._group = process_group
        if dist is not None:
            self.rank = dist.get_rank(process_group)
            self.world_size = dist.get_world_size(process_group)
        else:
            self.rank, self.world_size = 0, 1
        if not self.remote:
            os.makedirs(self.dir, exist_ok=True)
        session = [uuid.uuid4().hex if self.rank == 0 else None]
        if dist is not None and self.world_size > 1:
            dist.broadcast_object_list(session, src=dist.get_global_rank(process_group, 0)
                                       if process_group is not None else 0, group=process_group)
        self.session = session[0]
        self._seq = 0
        if copy_threads == 0:
            local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
            copy_threads = max(1, min(4, (os.cpu_count() or 1) // local))
        self._core = _core.Checkpointer(f"{self.dir}/rank-{self.rank}", _KEEP_ALL,
                                        max_in_flight, "wait", copy_threads,
                                        endpoint=endpoint or "",
                                        multipart_threshold_bytes=int(multipart_threshold_bytes),
                                        part_bytes=int(part_bytes))
        self._commit_timeout_s = float(commit_timeout_s)
        self._owners_key = None
        self._owners: Dict[str, int] = {}
        self._last: Optional[Tuple[int, int]] = None  # (step, seq) of the last save
        self._closed = False
        self._error: Optional[BaseException] = None
        self._error_seq = 0
        self._failed_seq = 0  # saves up to this one failed and were reported: not waited for
        self._durable_ns: Dict[int, int] = {}  # seq -> save call to global commit (rank 0)
        self._blocking_ns: List[int] = []
        self._staging = _DeviceStaging(self._core)  # guarded CUDA pieces: D2H on a side stream
        self._deferred = _Deferred(copy_threads)  # guarded pieces: copied after save returns
        self._queue: "queue.Queue[Optional[Tuple[int, int, int]]]" = queue.Queue()
        self._thread = None
        if self.rank == 0:
            self._thread = threading.Thread(target=self._coordinate, name="saturate-ckpt-commit",
                                            daemon=True)
            self._thread.start()

    # ---- save ----

    def _owners_for(self, items: Dict[str, _Item]) -> Dict[str, int]:
        # A replicated item is one piece, the whole tensor, on every rank.
        sizes = tuple(sorted((i.fqn, _volume(i.global_shape) * i.pieces[0][2].element_size())
                             for i in items.values() if i.replicated))
        if sizes != self._owners_key:
            self._owners_key = sizes
            self._owners = assign_owners(sizes, self.world_size)
        return self._owners

    def prepare(self, state: Any) -> None:
        """Allocates and faults in this rank's host pool for saves of ``state``
        (see saturate.Checkpointer.prepare), so the first save blocks no longer
        than later ones."""
        with _core.Phase("checkpoint_prepare", "checkpoint"):
            items, _ = _collect(state)
            specs, _, _, _ = self._plan(items)
            self._core.prepare([s[2] for s in specs])

    def _plan(self, items: Dict[str, _Item], keys: Optional[set] = None):
        """(engine specs, piece records, tensors kept alive, deferred) this rank
        writes; deferred: (spec index, tensor) of the contiguous pieces that live
        in a storage of ``keys`` (a guard's), left to the background copy (their
        spec has no data)."""
        owners = self._owners_for(items)
        specs, pieces, keep, deferred = [], [], [], []
        for item in items.values():
            if item.replicated and owners[item.fqn] != self.rank:
                continue
            if item.kind == "dtensor" and not item.replicated and not item.mesh_owner:
                continue
            for offsets, lengths, t in item.pieces:
                if _volume(lengths) == 0:
                    continue
                t = t.detach()
                later = bool(keys) and t.is_contiguous() and _is_guarded(t, keys)
                if not later:
                    if t.device.type != "cpu":
                        t = t.cpu()  # untested here (no GPU): a blocking device->host copy
                    t = t.contiguous()
                keep.append(t)
                nbytes = t.numel() * t.element_size()
                pieces.append({"fqn": item.fqn, "index": len(specs), "offsets": list(offsets),
                               "lengths": list(lengths)})
                if later:
                    deferred.append((len(specs), t))
                specs.append((f"{item.fqn}@{','.join(map(str, offsets))}",
                              0 if later else t.data_ptr(), nbytes, item.dtype, list(lengths),
                              "cpu"))
        return specs, pieces, keep, deferred

    def save(self, state: Any, step: int, *, guard: Any = None) -> bool:
        """Snapshots this rank's part of ``state`` as checkpoint ``step`` and
        returns once it is copied (True). Every rank must call it with the
        same steps in the same order.

        ``guard``: a torch.optim.Optimizer or a list of them (torch >= 2.0), as
        saturate.Checkpointer.save: this rank's pieces that live in the
        optimizers' params or state (a DTensor's local shard included) are
        copied after save returns, and the optimizers' next step() waits for
        those copies. Between save(guard=opt) and opt.step() only the
        optimizer may write those tensors."""
        self._raise_error()
        self._deferred.raise_error()
        if self._closed:
            raise InvalidArgumentError("save() after close()")
        start = time.perf_counter_ns()
        step = int(step)
        opts = None
        if guard is not None:
            opts = _guard_optimizers(guard)
            self._deferred.protect(opts)
        with _Span("checkpoint_save", step, self._seq + 1):
            items, ids = _collect(state)
            keys = _guarded_storages(opts) if opts is not None else None
            specs, pieces, keep, deferred = self._plan(items, keys)
            self._seq += 1
            meta = {
                "format": _RANK_FORMAT, "version": 1, "session": self.session, "seq": self._seq,
                "rank": self.rank, "world_size": self.world_size, "step": step, "pieces": pieces,
                "tensors": {i.fqn: {"kind": i.kind, "dtype": i.dtype, "shape": i.global_shape,
                                    "device": i.device, "parameter": i.parameter,
                                    "requires_grad": i.requires_grad, "replicated": i.replicated}
                            for i in items.values()},
                "structure": _structure_bytes(state, ids),
            }
            blob = pickle.dumps(meta, protocol=4)
            if deferred:
                self._save_deferred(step, specs, blob, deferred)
            else:
                self._core.save(step, specs, blob)  # on_busy "wait": True
            del keep
        self._last = (step, self._seq)
        if self._thread is not None:
            self._queue.put((step, self._seq, start))
        self._blocking_ns.append(time.perf_counter_ns() - start)
        return True

    def _save_deferred(self, step: int, specs, blob: bytes, deferred) -> None:
        """Begin copies the unguarded pieces now; the guarded ones are copied
        (host) or waited for (device, D2H on the side stream) by the
        background thread, which then commits the rank's snapshot."""
        pending = self._core.begin(step, specs)  # on_busy "wait": never None
        on_device = [(i, t) for i, t in deferred if t.device.type == "cuda"]
        event = device = None
        if on_device:
            event = self._staging.copy(pending, [], on_device)
            device = on_device[0][1].device
        host = [(pending.destination(i), t.data_ptr(), specs[i][2]) for i, t in deferred
                if t.device.type == "cpu"]
        self._deferred.submit(_Job(step, self._seq, host, event, device,
                                   lambda: self._core.commit(pending, blob),
                                   [(specs[i][0], t) for i, t in deferred]))

    # ---- the coordinator (rank 0) ----

    def _coordinate(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._error is not None:
                continue  # the first failure is reported; later saves are not committed
            step, seq, start = job
            try:
                self._commit(step, seq)
                self._durable_ns[seq] = time.perf_counter_ns() - start
            except BaseException as e:  # raised to the training thread by the next call
                self._error_seq = seq
                self._error = e
                try:  # the other ranks' wait() reads it instead of timing out
                    _write(self.dir, _FAILED, json.dumps(
                        {"session": self.session, "seq": seq, "step": step,
                         "error": f"{type(e).__name__}: {e}"}).encode())
                except OSError:
                    pass

    def _wait_rank(self, rank: int, step: int, seq: int):
        rel = f"rank-{rank}/step-{step}"
        path = f"{self.dir}/{rel}"
        deadline = time.monotonic() + self._commit_timeout_s
        delay = 0.001
        with _Span(f"checkpoint_wait_rank{rank}", step, seq, rank):
            while True:
                got = _read_rank(self.dir, rel)
                if got is not None and got[1].get("session") == self.session and \
                        got[1].get("seq") == seq:
                    return got
                if time.monotonic() > deadline:
                    raise UnavailableError(
                        f"{path}: rank {rank} did not commit step {step} within "
                        f"{self._commit_timeout_s:.0f} s (the global checkpoint is not written)")
                time.sleep(delay)
                delay = min(delay * 2, _poll_max_s(self.dir))

    def _commit(self, step: int, seq: int) -> None:
        ranks = [self._wait_rank(r, step, seq) for r in range(self.world_size)]
        with _Span("checkpoint_commit", step, seq):
            body = _global_manifest(self.dir, step, ranks, self.world_size)
            body["sha256"] = hashlib.sha256(_canonical(body)).hexdigest()
            _write(self.dir, f"step-{step}.manifest.json", json.dumps(body, indent=1).encode())
            self._retain(step)

    def _retain(self, just: int) -> None:
        found = list_checkpoints(self.dir)
        kept = [s for s, _ in found[:self.keep]]
        if just not in kept:
            kept = kept[:-1] + [just]
        if self.remote:
            self._retain_remote(found, kept)
            return
        for s, path in found:
            if s not in kept:
                os.unlink(path)
        if len(found) > len(kept):
            _fsync_dir(self.dir)
        # Rank directories no kept manifest names, older than the oldest kept
        # (newer ones may be a save in flight).
        oldest = min(kept)
        import shutil

        for r in range(self.world_size):
            rdir = os.path.join(self.dir, f"rank-{r}")
            if not os.path.isdir(rdir):
                continue
            for name in os.listdir(rdir):
                m = _STEP_RE.match(name)
                if m and int(m.group(1)) < oldest and int(m.group(1)) not in kept:
                    shutil.rmtree(os.path.join(rdir, name), ignore_errors=True)

    def _retain_remote(self, found, kept) -> None:
        """Manifests beyond ``keep`` first, then the rank objects of steps no kept
        manifest names that are older than the oldest kept one."""
        store = _store(self.dir)
        for s, path in found:
            if s not in kept:
                store.delete(os.path.basename(path))
        oldest = min(kept)
        for name in store.list():
            m = re.match(r"^rank-[0-9]+/step-(0|[1-9][0-9]*)/", name)
            if m and int(m.group(1)) < oldest and int(m.group(1)) not in kept:
                store.delete(name)

    # ---- waiting, closing ----

    def _raise_error(self) -> None:
        if self._error is not None:
            self._failed_seq = max(self._failed_seq, self._error_seq)
            e, self._error = self._error, None
            if isinstance(e, Exception):
                raise e
            raise InternalError(f"checkpoint coordinator: {e!r}")

    def _raise_peer_failure(self, seq: int) -> None:
        self._raise_error()  # rank 0: its own failure, with its traceback
        try:
            failed = json.loads(_read(self.dir, _FAILED) or b"null")
        except ValueError:
            return
        if not isinstance(failed, dict):
            return
        if failed.get("session") == self.session and failed.get("seq", 1 << 62) <= seq:
            self._failed_seq = max(self._failed_seq, int(failed["seq"]))
            raise CorruptionError(f"rank 0 could not commit step {failed.get('step')}: "
                                  f"{failed.get('error')}")

    def wait(self, timeout_s: Optional[float] = None) -> None:
        """Blocks until this rank's saves are written and the last save is
        globally committed (its manifest renamed into place); raises a failure."""
        self._deferred.wait()  # guarded saves: copied and handed to the engine first
        self._deferred.raise_error()
        self._core.wait()
        if self._last is None:
            self._raise_error()
            return
        step, seq = self._last
        if seq <= self._failed_seq:
            return  # its failure was raised already
        path = _manifest_path(self.dir, step)
        deadline = time.monotonic() + (self._commit_timeout_s if timeout_s is None else timeout_s)
        delay = 0.001
        with _Span("checkpoint_wait_commit", step, seq):
            while True:
                self._raise_error()
                try:
                    m = json.loads(_read(self.dir, f"step-{step}.manifest.json") or b"null")
                    if isinstance(m, dict) and m.get("session") == self.session and \
                            m.get("seq") == seq:
                        return
                except ValueError:
                    pass
                self._raise_peer_failure(seq)
                if time.monotonic() > deadline:
                    raise UnavailableError(f"{path}: step {step} not committed within the timeout")
                time.sleep(delay)
                delay = min(delay * 2, _poll_max_s(self.dir))

    def close(self) -> None:
        """wait(), then stops the writer and the coordinator. Idempotent."""
        if self._closed:
            return
        try:
            self.wait()
        finally:
            self._closed = True
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join()
            self._deferred.close()
            self._core.close()

    def __enter__(self) -> "DistCheckpointer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stats(self) -> Dict[str, Any]:
        """The engine's counters for this rank, plus ``blocking_ns`` (the last
        save's time in save()) and, on rank 0, ``durable_ns`` (the last
        committed save: from its save() call to its manifest's rename).
        Guarded saves add ``guard_wait_ns`` (the optimizer hooks' wait for
        the last guarded save), ``total_guard_wait_ns``, ``blocked_ns``
        (blocking_ns + guard_wait_ns), ``deferred_bytes``, ``deferred_copy_ns``
        and ``guard_saves``, as saturate.Checkpointer.stats."""
        s = self._core.stats()
        s["blocking_ns"] = self._blocking_ns[-1] if self._blocking_ns else 0
        s.update(self._deferred.last_stats())
        s["blocked_ns"] = s["blocking_ns"] + s["guard_wait_ns"]
        s["durable_ns"] = self._durable_ns[max(self._durable_ns)] if self._durable_ns else None
        return s


def _global_manifest(dir: str, step: int, ranks, world_size: int) -> Dict[str, Any]:
    """The manifest body from every rank's (engine manifest, metadata); checks
    that the pieces tile each tensor exactly once."""
    tensors: Dict[str, Dict[str, Any]] = {}
    rank_entries = []
    seq = session = None
    for r, (manifest, meta) in enumerate(ranks):
        if meta.get("format") != _RANK_FORMAT or meta["rank"] != r:
            raise CorruptionError(f"rank-{r}/step-{step}: unexpected metadata")
        if meta["world_size"] != world_size:
            raise CorruptionError(f"rank-{r}/step-{step}: world size {meta['world_size']}, "
                                  f"expected {world_size}")
        seq, session = meta["seq"], meta["session"]
        rdir = f"rank-{r}/step-{step}"
        rank_entries.append({"rank": r, "dir": rdir, "manifest_xxh3": manifest["xxh3"]})
        for fqn, t in meta["tensors"].items():
            entry = tensors.setdefault(fqn, {"dtype": t["dtype"], "shape": t["shape"],
                                             "kind": t["kind"], "shards": []})
            if entry["dtype"] != t["dtype"] or entry["shape"] != t["shape"]:
                raise CorruptionError(
                    f"tensor {fqn}: rank {r} has {t['dtype']}{t['shape']}, another rank "
                    f"{entry['dtype']}{entry['shape']}")
        for p in meta["pieces"]:
            e = manifest["tensors"][p["index"]]
            tensors[p["fqn"]]["shards"].append({
                "rank": r, "file": f"{rdir}/{e['file']}", "offset": e["offset"],
                "bytes": e["bytes"], "offsets": p["offsets"], "lengths": p["lengths"]})
    for fqn, entry in tensors.items():
        covered = sum(_volume(s["lengths"]) for s in entry["shards"])
        if covered != _volume(entry["shape"]):
            raise CorruptionError(
                f"tensor {fqn}: the ranks' pieces hold {covered} of {_volume(entry['shape'])} "
                "elements (ranks disagree on which tensors are replicated, or pieces overlap)")
        for a in range(len(entry["shards"])):
            for b in range(a + 1, len(entry["shards"])):
                sa, sb = entry["shards"][a], entry["shards"][b]
                if intersect(sa["offsets"], sa["lengths"], sb["offsets"], sb["lengths"]):
                    raise CorruptionError(f"tensor {fqn}: pieces of ranks {sa['rank']} and "
                                          f"{sb['rank']} overlap")
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "step": step,
            "world_size": world_size, "created_unix_ms": int(time.time() * 1000),
            "session": session, "seq": seq, "ranks": rank_entries, "tensors": tensors}


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


class _Files:
    """Private copy-on-write maps of the rank files, opened on first use.
    Remote: each rank file is downloaded whole on first use (parallel ranged
    GETs) and checked against its rank manifest (size, XXH3-64), which itself
    matched the global manifest when the checkpoint was chosen."""

    def __init__(self, dir: str):
        self.dir, self.maps = dir, {}

    def _download(self, rel: str):
        rank_dir, name = rel.rsplit("/", 1)
        _, buffers = _fetch_verified(_store(self.dir), rank_dir, names={name})
        if name not in buffers:
            raise CorruptionError(f"{self.dir}/{rel}: not listed in its rank manifest")
        return buffers[name]

    def piece(self, shard: Dict[str, Any], dtype: str, kind: str):
        torch = _torch()
        path = os.path.join(self.dir, shard["file"])
        buf = self.maps.get(path)
        if buf is None and _is_remote(self.dir):
            buf = self.maps[path] = self._download(shard["file"])
        if buf is None:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                buf = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) if size else bytearray()
            self.maps[path] = buf
        tdtype = torch.from_numpy(np.empty(0, np.dtype(dtype))).dtype if kind == "numpy" \
            else getattr(torch, dtype)
        t = torch.frombuffer(buf, dtype=torch.uint8, count=shard["bytes"], offset=shard["offset"])
        return t.view(tdtype).reshape(shard["lengths"])


def _fill(target, t_offsets, entry, files: _Files, fqn: str) -> None:
    """Copies every saved piece that intersects the target box into ``target``."""
    covered = 0
    for s in entry["shards"]:
        box = intersect(t_offsets, list(target.shape), s["offsets"], s["lengths"])
        if box is None:
            continue
        off, lens = box
        src = files.piece(s, entry["dtype"], entry["kind"])
        src = src[tuple(slice(o - p, o - p + n) for o, p, n in zip(off, s["offsets"], lens))]
        dst = target[tuple(slice(o - q, o - q + n) for o, q, n in zip(off, t_offsets, lens))]
        dst.copy_(src)
        covered += _volume(lens)
    if covered != target.numel():
        raise CorruptionError(f"tensor {fqn}: the checkpoint covers {covered} of the "
                              f"{target.numel()} elements asked for")


def _check_global(fqn: str, entry, shape) -> None:
    if list(shape) != list(entry["shape"]):
        raise InvalidArgumentError(f"tensor {fqn}: checkpoint shape {entry['shape']}, "
                                   f"target shape {list(shape)}")


def _load_into(item: _Item, entry, files: _Files) -> Any:
    """Fills the target's local part in place; returns the target object."""
    _check_global(item.fqn, entry, item.global_shape)
    torch = _torch()
    if item.kind == "numpy":
        _fill(torch.from_numpy(item.obj), [0] * item.obj.ndim, entry, files, item.fqn)
        return item.obj
    for offsets, lengths, t in item.pieces:
        if _volume(lengths) == 0:
            continue
        with torch.no_grad():
            if t.device.type == "cpu":
                _fill(t, offsets, entry, files, item.fqn)
            else:
                host = torch.empty(t.shape, dtype=t.dtype)
                _fill(host, offsets, entry, files, item.fqn)
                t.copy_(host)
    return item.obj


def _load_full(fqn: str, entry, tmeta, files: _Files, map_location) -> Any:
    torch = _torch()
    shards = entry["shards"]
    if len(shards) == 1 and shards[0]["lengths"] == entry["shape"]:
        t = files.piece(shards[0], entry["dtype"], entry["kind"])  # a map of the file, no copy
    else:
        dtype = torch.from_numpy(np.empty(0, np.dtype(entry["dtype"]))).dtype \
            if entry["kind"] == "numpy" else getattr(torch, entry["dtype"])
        t = torch.empty(entry["shape"], dtype=dtype)
        _fill(t, [0] * len(entry["shape"]), entry, files, fqn)
    if entry["kind"] == "numpy":
        return t.numpy()
    if map_location is not None:
        t = t.to(map_location)
    if tmeta.get("parameter"):
        t = torch.nn.Parameter(t, requires_grad=tmeta.get("requires_grad", False))
    return t


class _StructureUnpickler(pickle.Unpickler):
    def __init__(self, file, resolve):
        super().__init__(file)
        self.resolve = resolve

    def persistent_load(self, pid):
        tag, fqn = pid
        if tag != _TAG:
            raise pickle.UnpicklingError(f"unknown persistent id {tag!r}")
        return self.resolve(fqn)


def _choose(dir: str, step: Optional[int], verify: bool, process_group) -> Optional[Dict[str, Any]]:
    """The manifest to load: rank 0 picks (and verifies) and tells the others,
    so every rank loads the same checkpoint."""
    dist = _dist()
    multi = dist is not None and dist.get_world_size(process_group) > 1
    chosen: List[Any] = [None]
    error: List[Any] = [None]
    if not multi or dist.get_rank(process_group) == 0:
        try:
            if step is None:
                chosen[0] = latest(dir, verify=verify)
            else:
                m = _read_manifest(_manifest_path(dir, step))
                if verify:
                    _verify(dir, m)
                m["path"] = _manifest_path(dir, step)
                chosen[0] = m
        except Exception as e:  # told to every rank, raised everywhere
            error[0] = f"{type(e).__name__}: {e}"
            if not multi:
                raise
    if multi:
        box = [chosen[0], error[0]]
        src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
        dist.broadcast_object_list(box, src=src, group=process_group)
        chosen[0], error[0] = box
        if error[0] is not None:
            raise CorruptionError(f"{dir}: rank 0 could not choose a checkpoint: {error[0]}")
    return chosen[0]


def load(dir: str, state: Any = None, *, step: Optional[int] = None, rank: Optional[int] = None,
         process_group=None, map_location: Any = None, verify: bool = True, info: bool = False,
         endpoint: Optional[str] = None):
    """Loads the newest globally committed checkpoint in ``dir`` that verifies
    (or ``step``), at any world size.

    - ``state`` None: the whole state in this process (evaluation, conversion):
      every tensor assembled to its global shape (DTensor, ShardedTensor and
      Shard become plain tensors), non-tensor values as rank ``rank`` saved
      them (default: this process's rank when it is one of the saved ranks,
      else rank 0).
    - ``state`` given (like the one saved, at this world size): every tensor in
      it found by its path is filled in place, DTensor and ShardedTensor with
      their local shards' slices, Shard with its box, plain tensors whole, from
      the saved pieces they intersect. Returns the saved structure with those
      objects in it (tensors it lacks come back whole).

    Collective when torch.distributed is initialized and the group has more
    than one rank (rank 0 chooses and verifies the checkpoint). None when
    ``dir`` holds no committed checkpoint; CorruptionError when some exist and
    none verifies. ``info=True`` also returns {"step", "path", "world_size"}.

    An s3:// ``dir`` (``endpoint``: as DistCheckpointer's): rank 0 checks the
    manifests and that every listed object exists; each rank downloads the
    rank files its tensors intersect, whole, and checks their size and XXH3
    before using them (a mismatch raises CorruptionError naming the object).
    """
    if _is_remote(dir):
        dir = dir.rstrip("/")
        if endpoint:
            _ENDPOINTS[dir] = endpoint
    else:
        dir = os.path.abspath(os.fspath(dir))
    m = _choose(dir, step, verify, process_group)
    if m is None:
        return (None, None) if info else None
    dist = _dist()
    if rank is None:
        rank = dist.get_rank(process_group) if dist is not None else 0
    if not 0 <= rank < m["world_size"]:
        rank = 0
    base = os.path.dirname(m["path"])
    files = _Files(base)
    got = _read_rank(base, m["ranks"][rank]["dir"])
    if got is None:
        raise CorruptionError(f"{base}/{m['ranks'][rank]['dir']}: missing")
    _, meta = got
    targets, _ = _collect(state) if state is not None else ({}, {})
    missing = [fqn for fqn in targets if fqn not in m["tensors"]]
    if missing:
        raise InvalidArgumentError(f"{m['path']}: no tensor {missing[0]!r} in the checkpoint "
                                   f"({len(missing)} missing)")
    built: Dict[str, Any] = {}

    def resolve(fqn: str):
        if fqn not in built:
            entry = m["tensors"][fqn]
            if fqn in targets:
                built[fqn] = _load_into(targets[fqn], entry, files)
            else:
                built[fqn] = _load_full(fqn, entry, meta["tensors"].get(fqn, {}), files,
                                        map_location)
        return built[fqn]

    import io

    out = _StructureUnpickler(io.BytesIO(meta["structure"]), resolve).load()
    for fqn in targets:  # targets the saved structure does not reach (renamed paths) still load
        resolve(fqn)
    if info:
        return out, {"step": m["step"], "path": m["path"], "world_size": m["world_size"]}
    return out


# ---------------------------------------------------------------------------
# torch.distributed.checkpoint (DCP) interop
# ---------------------------------------------------------------------------


def _flat_keys(state, prefix: str = "") -> Dict[str, Any]:
    out = {}
    if isinstance(state, dict):
        for k, v in state.items():
            out.update(_flat_keys(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = state
    return out


def to_dcp(src: str, dst: str, *, step: Optional[int] = None) -> int:
    """Writes the checkpoint of ``src`` (newest, or ``step``) as a
    torch.distributed.checkpoint directory ``dst`` that ``dcp.load`` reads at
    any world size (tensors whole, DCP re-cuts them). Nested dicts keep their
    structure (DCP flattens them itself). Runs in one process; returns the step."""
    torch = _torch()
    import torch.distributed.checkpoint as dcp

    state, inf = load(src, step=step, info=True)
    if state is None:
        raise InvalidArgumentError(f"{src}: no committed checkpoint")
    if not isinstance(state, dict):
        raise InvalidArgumentError("DCP needs a dict state")
    state = _to_torch(state, torch)
    with warnings.catch_warnings():  # "assuming ... a single process": that is the intent
        warnings.filterwarnings("ignore", message=".*single process", category=UserWarning)
        dcp.save(state, storage_writer=dcp.FileSystemWriter(dst), no_dist=True)
    return inf["step"]


def _to_torch(state, torch):
    if isinstance(state, dict):
        return {k: _to_torch(v, torch) for k, v in state.items()}
    if isinstance(state, np.ndarray):
        return torch.from_numpy(state)
    if isinstance(state, torch.Tensor):
        return state.detach().clone()  # a plain tensor, not a map of the file
    return state


def from_dcp(src: str, dst: str, step: int = 0, *, keep: int = 3) -> int:
    """Reads the DCP checkpoint directory ``src`` whole (in one process) and
    commits it as saturate checkpoint ``step`` in ``dst`` (world size 1; loads
    at any world size). Returns the number of tensors."""
    torch = _torch()
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: Dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*single process", category=UserWarning)
        _load_state_dict(state, storage_reader=FileSystemReader(src),
                         planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    with DistCheckpointer(dst, keep=keep) as ckpt:
        if ckpt.world_size != 1:
            raise InvalidArgumentError("from_dcp runs in one process (no process group)")
        ckpt.save(state, step)
    return sum(1 for v in _flat_keys(state).values() if isinstance(v, torch.Tensor))


def main(argv: Optional[List[str]] = None) -> int:
    """python -m saturate.dist_checkpoint {to-dcp,from-dcp} SRC DST [--step N]"""
    import argparse

    p = argparse.ArgumentParser(prog="python -m saturate.dist_checkpoint",
                                description="convert between saturate and DCP checkpoints")
    p.add_argument("command", choices=["to-dcp", "from-dcp"])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--step", type=int, default=None)
    a = p.parse_args(argv)
    if a.command == "to-dcp":
        to_dcp(a.src, a.dst, step=a.step)
    else:
        from_dcp(a.src, a.dst, a.step or 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
