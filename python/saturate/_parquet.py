"""Parquet files (Hugging Face datasets' format) packed into a saturate dataset.

pyarrow reads the files (Apache Arrow's C++ library is not packaged where saturate is built,
and pyarrow is what Parquet users have), one record batch at a time
(``ParquetFile.iter_batches``: memory bounded by the batch, not the file); the engine's pack
writer stores the records (``_core.pack_stream``: the same image checks, re-encoding, restart
markers, staging and ``skip_bad`` as every other ``saturate pack``).

Columns: ``image_column`` holds the encoded images, as binary or as the struct
``{bytes, path}`` Hugging Face's ``Image`` feature writes; ``label_column`` integer labels (a
``ClassLabel``'s names, from the file's Hugging Face metadata, become the class names) or text
class names (sorted into ids); every other scalar column is kept as a field of its name (integers
and booleans as int64, reals as float32, text and binary as bytes). Nested columns (lists,
structs) are left out and listed in the summary's ``ignored_columns``.

Also the ``saturate pack`` command line for Parquet inputs (``main``), which the ``saturate``
command (``saturate.__main__``) runs instead of the C++ tool.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from . import _core, _progress
from .errors import CorruptionError, InvalidArgumentError, NotFoundError

BATCH_ROWS = 256
_INSTALL = "pip install 'saturate[parquet]' (pyarrow)"


def is_parquet(path: str) -> bool:
    return str(path).lower().endswith((".parquet", ".parq"))


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as e:
        raise InvalidArgumentError(f"Parquet files are read with pyarrow: {_INSTALL} ({e})") from e
    return pyarrow


def _expand_braces(pattern: str) -> List[str]:
    """`a-{000..002}.x` and `{train,test}` as a shell expands them (ranges keep their width)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    head, body, tail = pattern[: m.start()], m.group(1), pattern[m.end():]
    r = re.fullmatch(r"(-?\d+)\.\.(-?\d+)", body)
    if r:
        lo, hi = int(r.group(1)), int(r.group(2))
        width = len(r.group(1)) if r.group(1).startswith("0") else 0
        step = 1 if hi >= lo else -1
        items = [str(i).zfill(width) for i in range(lo, hi + step, step)]
    elif "," in body:
        items = body.split(",")
    else:
        items = ["{" + body + "}"]
        return [head + items[0] + x for x in _expand_braces(tail)]
    return [x for item in items for x in _expand_braces(head + item + tail)]


def expand(sources: Sequence[str]) -> List[str]:
    """Files named by patterns (braces, then globs, each glob's matches sorted)."""
    files = []
    for source in sources:
        for name in _expand_braces(os.fspath(source)):
            if glob.has_magic(name):
                matches = sorted(glob.glob(name))
                if not matches:
                    raise NotFoundError(f"{name}: matches no file")
                files += matches
            elif not os.path.isfile(name):
                raise NotFoundError(f"{name}: no such file")
            else:
                files.append(name)
    return files


def _image_kind(pa, type_) -> Optional[str]:
    """'binary' or 'struct' (Hugging Face's {bytes, path}) when `type_` holds encoded images."""
    t = pa.types
    if t.is_binary(type_) or t.is_large_binary(type_) or t.is_fixed_size_binary(type_):
        return "binary"
    if t.is_struct(type_):
        names = [type_.field(i).name for i in range(type_.num_fields)]
        if "bytes" in names:
            b = type_.field("bytes").type
            if t.is_binary(b) or t.is_large_binary(b):
                return "struct"
    return None


def _field_kind(pa, type_) -> Optional[str]:
    """The saturate field kind an extra scalar column becomes, or None (left out)."""
    t = pa.types
    if t.is_dictionary(type_):
        type_ = type_.value_type
    if t.is_integer(type_) or t.is_boolean(type_):
        return "int64"
    if t.is_floating(type_):
        return "float32"
    if t.is_string(type_) or t.is_large_string(type_) or t.is_binary(type_) or \
            t.is_large_binary(type_) or t.is_fixed_size_binary(type_):
        return "bytes"
    return None


def _hf_class_names(schema, column: str) -> List[str]:
    """A Hugging Face ClassLabel's names, from the schema's "huggingface" metadata."""
    meta = (schema.metadata or {}).get(b"huggingface")
    if not meta:
        return []
    try:
        feature = json.loads(meta)["info"]["features"][column]
    except (ValueError, KeyError, TypeError):
        return []
    if isinstance(feature, dict) and feature.get("_type") == "ClassLabel":
        return [str(n) for n in feature.get("names") or []]
    return []


class _Plan:
    """What each column of the first file becomes; later files must have the same columns."""

    def __init__(self, pa, path, schema, image_column, label_column):
        names = schema.names

        def missing(column, option):
            return InvalidArgumentError(
                f"{path}: no column '{column}' ({option}); the file has columns "
                + ", ".join(f"'{n}' ({schema.field(n).type})" for n in names))

        if image_column not in names:
            raise missing(image_column, "image_column / --image-column")
        self.image_column = image_column
        self.image_kind = _image_kind(pa, schema.field(image_column).type)
        self.check(pa, path, schema)
        self.label_column = label_column or None
        self.label_text = False
        if self.label_column:
            if self.label_column not in names:
                raise missing(label_column, "label_column / --label-column, '' for none")
            kind = _field_kind(pa, schema.field(label_column).type)
            self.label_text = kind == "bytes"
            self.check_label(pa, path, schema)
        self.extras: List[Tuple[str, str]] = []
        self.ignored: List[str] = []
        for name in names:
            if name in (image_column, self.label_column):
                continue
            kind = _field_kind(pa, schema.field(name).type)
            if kind is None:
                self.ignored.append(name)
                continue
            if name == "image" or (name == "label" and self.label_column):
                raise InvalidArgumentError(
                    f"{path}: column '{name}' clashes with the field pack creates from "
                    f"'{image_column if name == 'image' else label_column}'; rename it")
            self.extras.append((name, kind))
        self.types = {n: schema.field(n).type for n in self.columns()}

    def columns(self) -> List[str]:
        return [self.image_column] + ([self.label_column] if self.label_column else []) + \
            [n for n, _ in self.extras]

    def check(self, pa, path, schema):
        if self.image_kind is None:
            raise CorruptionError(self.wrong_image(path, schema.field(self.image_column).type))

    def wrong_image(self, path, type_):
        return (f"{path}: column '{self.image_column}' is {type_}, expected encoded images: "
                "binary, or struct<bytes: binary, path: string> (Hugging Face's Image feature)")

    def check_label(self, pa, path, schema):
        kind = _field_kind(pa, schema.field(self.label_column).type)
        if kind not in ("int64", "bytes") or (kind == "bytes") != self.label_text:
            want = "text class names" if self.label_text else "integers or text class names"
            raise CorruptionError(
                f"{path}: column '{self.label_column}' is "
                f"{schema.field(self.label_column).type}, expected {want}")

    def check_file(self, pa, path, schema):
        for name in self.columns():
            if name not in schema.names:
                raise InvalidArgumentError(f"{path}: no column '{name}' (the first file has it)")
        type_ = schema.field(self.image_column).type
        if _image_kind(pa, type_) is None:
            raise CorruptionError(self.wrong_image(path, type_))
        if _image_kind(pa, type_) != self.image_kind:
            raise CorruptionError(f"{path}: column '{self.image_column}' is {type_}, the first "
                                  f"file's {self.types[self.image_column]}")
        if self.label_column:
            self.check_label(pa, path, schema)
        for name, kind in self.extras:
            if _field_kind(pa, schema.field(name).type) != kind:
                raise CorruptionError(f"{path}: column '{name}' is {schema.field(name).type}, "
                                      f"the first file's {self.types[name]}")


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _image_bytes(value, kind: str, base: str):
    """(bytes, None) or (None, why) for one image cell."""
    if kind == "binary":
        return (value, None) if value is not None else (None, "no image (null)")
    if value is None:
        return None, "no image (null)"
    data, where = value.get("bytes"), value.get("path")
    if data is not None:
        return data, None
    if where:  # Hugging Face's Image feature may hold a path instead of the bytes
        for candidate in (where, os.path.join(base, where)):
            if os.path.isfile(candidate):
                with open(candidate, "rb") as f:
                    return f.read(), None
        return None, f"no image bytes, and its path '{where}' is not a file"
    return None, "no image (bytes and path are null)"


def _batches(pa, files, plan, class_ids) -> Iterator[tuple]:
    """(file, first_row, columns, bad) per record batch, as _core.pack_stream takes them."""
    import pyarrow.parquet as pq

    for path in files:
        pf = pq.ParquetFile(path)
        base = os.path.dirname(path)
        row = 0
        batches = pf.iter_batches(batch_size=BATCH_ROWS, columns=plan.columns())
        while True:
            try:
                batch = next(batches, None)
            except pa.ArrowException as e:  # a file that breaks while it is read
                raise CorruptionError(f"{path}: rows from {row}: {e}") from e
            if batch is None:
                break
            n = batch.num_rows
            bad: Dict[int, str] = {}
            images = []
            for r, value in enumerate(batch.column(plan.image_column).to_pylist()):
                data, why = _image_bytes(value, plan.image_kind, base)
                if why:
                    bad[r] = f"column '{plan.image_column}': {why}"
                images.append(data)
            columns = [images]
            if plan.label_column:
                labels = batch.column(plan.label_column).to_pylist()
                for r, v in enumerate(labels):
                    if v is None:
                        bad.setdefault(r, f"column '{plan.label_column}': no label (null)")
                        labels[r] = 0
                    elif plan.label_text:
                        labels[r] = class_ids[_text(v)]
                    else:
                        labels[r] = int(v)
                columns.append(labels)
            for name, kind in plan.extras:
                values = batch.column(name).to_pylist()
                for r, v in enumerate(values):
                    if v is None:
                        if kind == "int64":
                            bad.setdefault(r, f"column '{name}': null where an integer is kept")
                            values[r] = 0
                        else:
                            values[r] = float("nan") if kind == "float32" else b""
                    elif kind == "int64":
                        values[r] = int(v)
                columns.append(values)
            yield path, row, columns, bad
            row += n


def pack_parquet(
    sources: Sequence[str],
    out: str,
    *,
    image_column: str = "image",
    label_column: str = "label",
    shard_bytes: int = 256 << 20,
    threads: int = 0,
    force: bool = False,
    skip_bad: bool = False,
    reencode_max_side: int = 0,
    reencode_quality: int = 90,
    keep_jpeg_bytes: bool = False,
    progress=None,
) -> Dict[str, Any]:
    """Packs Parquet files (patterns or paths) into ``out``; see the module's docstring."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    files = expand(sources)
    if not files:
        raise InvalidArgumentError("no input files")
    try:
        first = pq.ParquetFile(files[0])
    except pa.ArrowException as e:
        raise CorruptionError(f"{files[0]}: not a readable Parquet file: {e}") from e
    plan = _Plan(pa, files[0], first.schema_arrow, image_column, label_column)
    total = 0
    for path in files:  # every file checked before anything is written
        try:
            pf = pq.ParquetFile(path)
        except pa.ArrowException as e:
            raise CorruptionError(f"{path}: not a readable Parquet file: {e}") from e
        plan.check_file(pa, path, pf.schema_arrow)
        total += pf.metadata.num_rows
    class_names: List[str] = []
    class_ids: Dict[str, int] = {}
    if plan.label_column and plan.label_text:
        # Text labels: sorted into ids, from the label column alone (a cheap first pass).
        seen = set()
        for path in files:
            table = pq.read_table(path, columns=[plan.label_column])
            seen.update(v for v in table.column(0).to_pylist() if v is not None)
        class_names = sorted({_text(v) for v in seen})
        class_ids = {name: i for i, name in enumerate(class_names)}
    elif plan.label_column:
        class_names = _hf_class_names(first.schema_arrow, plan.label_column)
    fields = [("image", "image")] + ([("label", "int64")] if plan.label_column else [])
    fields += plan.extras
    summary = _core.pack_stream(
        fields=fields, class_names=class_names,
        source="parquet:" + files[0] + (" ..." if len(files) > 1 else ""),
        records_total=total, batches=_batches(pa, files, plan, class_ids), out=out,
        options=_core.PackOptions(shard_bytes=shard_bytes, threads=threads, force=force,
                                  skip_bad=skip_bad, reencode_max_side=reencode_max_side,
                                  reencode_quality=reencode_quality,
                                  keep_jpeg_bytes=keep_jpeg_bytes),
        progress=progress)
    summary["ignored_columns"] = plan.ignored
    return summary


# ---- the command line: `saturate pack [parquet] FILE... OUT` -----------------------------------


_EXIT = {"invalid_argument": 2, "not_found": 2, "already_exists": 2, "unavailable": 2,
         "corruption": 3, "io_error": 4, "cancelled": 130}


def main(argv: Sequence[str]) -> int:
    """`saturate pack [parquet] FILE... OUT [flags]` for Parquet inputs; returns the exit code."""
    from . import _pack
    from ._pack import _size_bytes
    from .errors import Error

    args = list(argv)
    if args and args[0] == "parquet":
        args = args[1:]
    p = argparse.ArgumentParser(
        prog="saturate pack parquet",
        description="Pack Parquet files (Hugging Face datasets: an image column of bytes or "
                    "{bytes, path}, a label column) into a saturate dataset. Read with pyarrow.")
    p.add_argument("ARGS", nargs="+", help="FILE... OUT: Parquet files or patterns "
                   "('train-*.parquet'), then the output dataset directory")
    p.add_argument("--image-column", default="image", help="column of encoded images "
                   "(binary, or struct {bytes, path}) (default: image)")
    p.add_argument("--label-column", default="label",
                   help="column of integer labels or class names, '' for none (default: label)")
    p.add_argument("--shard-size", default="256MiB")
    p.add_argument("-j", "--threads", type=int, default=0)
    p.add_argument("--force", action="store_true")
    p.add_argument("--skip-bad", action="store_true")
    p.add_argument("--reencode-max-side", type=int, default=0)
    p.add_argument("--reencode-quality", type=int, default=90)
    p.add_argument("--keep-jpeg-bytes", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--endpoint", default="", help="OUT as s3://: the S3 endpoint (default "
                   "AWS_ENDPOINT_URL, else AWS)")
    p.add_argument("--multipart-bytes", default="64MiB",
                   help="OUT as s3://: upload shards larger than this as multipart uploads")
    a = p.parse_args(args)
    if len(a.ARGS) < 2:
        print("saturate pack: invalid_argument: give FILE... and OUT", file=sys.stderr)
        return 2
    out = a.ARGS[-1]
    bar = None if a.quiet else _progress.Bar("pack", "rec")

    def pack_to(local):
        return pack_parquet(
            a.ARGS[:-1], local, image_column=a.image_column, label_column=a.label_column,
            shard_bytes=_size_bytes(a.shard_size), threads=a.threads, force=a.force,
            skip_bad=a.skip_bad, reencode_max_side=a.reencode_max_side,
            reencode_quality=a.reencode_quality, keep_jpeg_bytes=a.keep_jpeg_bytes, progress=bar)

    try:
        if _pack.is_remote(out):
            s = _pack.pack_remote(out, pack_to, force=a.force, endpoint=a.endpoint,
                                  multipart_size=a.multipart_bytes)
        else:
            s = pack_to(out)
    except Error as e:
        if bar:
            bar.finish()
        print(f"saturate pack: {e.code}: {e}", file=sys.stderr)
        return _EXIT.get(e.code, 5)
    except ValueError as e:
        print(f"saturate pack: invalid_argument: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if bar:
            bar.finish()
        print("saturate pack: cancelled", file=sys.stderr)
        return 130
    if bar:
        bar.finish()
    if a.json:
        print(json.dumps({"dataset": out, **s}, indent=2))
        return 0
    rate = s["records"] / s["seconds"] if s["seconds"] > 0 else 0
    line = (f"packed {s['records']} records into {out}: {s['bytes'] / 2**20:.1f} MiB in "
            f"{s['shards']} shard(s), {s['seconds']:.1f}s ({rate:.0f} records/s)")
    if s["skipped"]:
        line += f", skipped {s['skipped']} bad input(s)"
    if s["ignored_columns"]:
        line += ", left out nested column(s) " + ", ".join(s["ignored_columns"])
    print(line)
    for note in s["skip_notes"]:
        print(f"  skipped: {note}")
    return 0
