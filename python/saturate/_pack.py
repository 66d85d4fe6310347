"""saturate.pack / saturate.verify: thin wrappers over the engine (as the CLI's
``saturate pack`` and ``saturate verify``). Both release the GIL while they work."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Dict, Optional, Sequence, Union

from . import _core, _parquet

PathLike = Union[str, os.PathLike]
_TABLE_SUFFIXES = (".csv", ".jsonl", ".ndjson")
_HDF5_SUFFIXES = (".h5", ".hdf5", ".he5")
_REMOTE_PREFIXES = ("s3://", "http://", "https://")


def _size_bytes(size: Union[int, str]) -> int:
    """256 * 2**20 or "256MiB" / "1GiB" / "64KiB"."""
    if isinstance(size, int):
        return size
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "b": 1}
    text = size.strip().lower()
    for unit, mult in units.items():
        if text.endswith(unit) and text[: -len(unit)].strip().isdigit():
            return int(text[: -len(unit)]) * mult
    if text.isdigit():
        return int(text)
    raise ValueError(f"shard_size: {size!r} (use bytes or e.g. '256MiB')")


def is_remote(out: PathLike) -> bool:
    return os.fspath(out).startswith(_REMOTE_PREFIXES)


def pack_remote(url: str, pack_local: Callable[[str], Dict[str, Any]], *, force: bool,
                endpoint: str = "", multipart_size: Union[int, str] = "64MiB") -> Dict[str, Any]:
    """``pack_local(dir)`` into a staging directory under ``$TMPDIR``, then uploads it to
    ``url``: every shard (multipart above ``multipart_size``), the manifest last. Returns
    ``pack_local``'s summary."""
    with tempfile.TemporaryDirectory(prefix="saturate-pack-") as staging:
        local = os.path.join(staging, "dataset")
        summary = pack_local(local)
        _core.upload_dataset(local=local, url=url, overwrite=force, endpoint=endpoint,
                             multipart_bytes=_size_bytes(multipart_size))
    return summary


def pack(
    source: PathLike,
    out: PathLike,
    *,
    labels: Optional[PathLike] = None,
    class_names: Sequence[str] = (),
    path_column: str = "path",
    label_column: str = "label",
    shard_size: Union[int, str] = "256MiB",
    threads: int = 0,
    force: bool = False,
    skip_bad: bool = False,
    reencode_max_side: int = 0,
    reencode_quality: int = 90,
    keep_jpeg_bytes: bool = False,
    image_key: Optional[str] = None,
    label_key: Optional[str] = None,
    image_column: str = "image",
    endpoint: str = "",
    multipart_size: Union[int, str] = "64MiB",
) -> Dict[str, Any]:
    """Packs a dataset into ``out`` and returns a summary dict (records, bytes, shards, ...).

    ``source`` is one of:
      - a directory in torchvision ImageFolder layout (``ROOT/<class>/<image>``);
      - a ``.csv`` / ``.jsonl`` / ``.ndjson`` table with one row per image (``path_column``,
        ``label_column``; other columns become fields);
      - an MNIST-style IDX images file, with ``labels=`` the IDX labels file;
      - WebDataset tar shards or TFRecord files of tf.Example, by pattern
        (``"laion-{000..009}.tar"``, ``"train-*.tfrecord"``, ``.gz`` too; a list of them), with
        ``image_key`` / ``label_key`` naming the TFRecord features (default
        ``image/encoded``, ``image/class/label``; docs/formats.md); in a bucket too
        (``"s3://bucket/laion/{00000..00999}.tar"``, or a glob in the last part of the name):
        fetched one object at a time (``endpoint=`` or ``AWS_ENDPOINT_URL``; docs/remote.md);
      - Parquet files (``"train-*.parquet"``, Hugging Face datasets; read with pyarrow,
        ``pip install 'saturate[parquet]'``), ``image_column`` holding the encoded images
        (binary, or the struct ``{bytes, path}``), ``label_column`` the labels (``""`` for
        none), other scalar columns kept as fields;
      - HDF5 files (``"data.h5"``, ``.hdf5``), ``image_key`` naming the dataset of encoded
        images or raw uint8 pixels (default ``images``), ``label_key`` the integer labels'
        (default ``labels``, ``""`` for none).

    JPEGs are stored losslessly rewritten with a restart marker per MCU (the same
    pixels, 4–8% more bytes), so that the loader entropy-decodes only the MCUs
    around each crop and resizes their YCbCr components as stored (batches equal
    to those of the original bytes up to rounding); ``keep_jpeg_bytes=True``
    stores them byte for byte.

    The output appears at ``out`` only when complete; ``force`` replaces an existing
    dataset (never a directory that is not one).

    ``out`` may be ``s3://bucket/prefix`` (credentials, region and ``AWS_ENDPOINT_URL`` from the
    usual places, or ``endpoint=``): the dataset is packed into a staging directory under
    ``$TMPDIR``, then every shard is uploaded (multipart above ``multipart_size``) and the
    manifest last, so readers see it only once whole (docs/remote.md).
    """
    if is_remote(out):
        args = dict(locals())
        return pack_remote(os.fspath(out), lambda local: pack(**dict(args, out=local)),
                           force=force, endpoint=endpoint, multipart_size=multipart_size)
    many = source if isinstance(source, (list, tuple)) else [source]
    sources = [os.fspath(s) for s in many]
    out = os.fspath(out)
    written = dict(shard_bytes=_size_bytes(shard_size), threads=threads, force=force)
    images = dict(skip_bad=skip_bad, reencode_max_side=reencode_max_side,
                  reencode_quality=reencode_quality, keep_jpeg_bytes=keep_jpeg_bytes)
    if sources and all(_parquet.is_parquet(s) for s in sources):
        return _parquet.pack_parquet(sources, out, image_column=image_column,
                                     label_column=label_column, **written, **images)
    options = _core.PackOptions(**written, **images)
    if sources and all(s.lower().endswith(_HDF5_SUFFIXES) for s in sources):
        return _core.pack_hdf5(
            files=_parquet.expand(sources), image_key="images" if image_key is None else image_key,
            label_key="labels" if label_key is None else label_key, out=out, options=options)
    if image_key is None:
        image_key = "image/encoded"
    if label_key is None:
        label_key = "image/class/label"
    if isinstance(source, (list, tuple)) or _core.is_source_pattern(os.fspath(source)):
        return _core.pack_source(sources=sources, image_key=image_key, label_key=label_key,
                                 out=out, options=options, endpoint=endpoint)
    source = os.fspath(source)
    if labels is not None:  # IDX arrays: no images to check or re-encode
        return _core.pack_idx(images=source, labels=os.fspath(labels),
                              class_names=list(class_names), out=out,
                              options=_core.PackOptions(**written))
    if source.lower().endswith(_TABLE_SUFFIXES):
        return _core.pack_table(table=source, path_column=path_column, label_column=label_column,
                                out=out, options=options)
    return _core.pack_folder(root=source, out=out, options=options)


def verify(dataset: PathLike, *, max_problems: int = 20, use_mmap: bool = True) -> Dict[str, Any]:
    """Checks every byte of a dataset. Returns ``{"ok", "records_checked", "bytes_checked",
    "problem_count", "problems"}``; raises only when the dataset cannot be read at all."""
    return _core.verify(dataset=os.fspath(dataset), max_problems=max_problems, use_mmap=use_mmap)
