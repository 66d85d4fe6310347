#!/usr/bin/env bash
# RRC-224 feed of the same photos in four (five) ways, side by side in one run (issue 23):
#   - WebDataset shards read directly by saturate (`saturate bench feed 'wds-{0..3}.tar'`);
#   - the same shards through `webdataset` + torch DataLoader (the best of several worker counts);
#   - TFRecord files of tf.Example read directly by saturate;
#   - with TF_PYTHON, the same TFRecord files through tf.data (bench/tfdata_feed.py:
#     TFRecordDataset, parse_single_example, decode_and_crop_jpeg, resize, AUTOTUNE), with
#     TensorFlow's default resize and with antialias=True (the resize saturate does), and
#     with decode_jpeg of the whole image and tf.slice of the crop (the slim/Inception way);
#   - the shards packed into saturate's format (`saturate pack`), fed by saturate;
#   - the same, packed with --keep-jpeg-bytes: the JPEGs as the shards hold them (no restart
#     markers), so its ratio to direct reading is the cost of reading alone;
#   - with S3=1, the shards in a local S3 server (SeaweedFS, bench/seaweedfs.sh), read in place
#     by saturate (`s3://bench/wds/wds-{0..3}.tar`: no cache with a global shuffle, no cache
#     with --block-shuffle, and into an empty --cache-dir) and streamed by `webdataset` +
#     DataLoader (`pipe:curl URL`, signed: webdataset's way to read a bucket), the same worker
#     counts.
# Direct reading uses the sidecar index's JPEG entry tables (docs/formats.md), made at the first
# open, which is timed first. The shards and TFRecord files are written by the formats' reference writers
# (webdataset.TarWriter, the tfrecord package). Prints images/s and the ratios, and CPU time
# per image (all threads, over the timed batches) where it is known (saturate, tf.data): on a
# machine shared with other work it moves less than images/s.
#
# usage: bench/formats_feed.sh [PHOTOS] [REPEATS]
#   PHOTOS   an ImageFolder (default /tmp/saturate-bench-photos/train, made with
#            scripts/make-photo-dataset --train 1000 --val 0 if missing)
#   env      SATURATE_CLI (default build-bench/tools/saturate/saturate, the Release build, when
#            built, else build/ci/tools/saturate/saturate), PYTHON (default .venv/bin/python,
#            with torch, torchvision, webdataset and tfrecord), TF_PYTHON (a Python with
#            tensorflow or tensorflow-cpu, e.g. .venv-tf/bin/python; unset: no tf.data side),
#            THREADS (saturate's threads and TensorFlow's pools, default: all cores), WORKERS
#            (DataLoader worker counts, default "0 1 2 4"), BATCHES (timed batches per
#            DataLoader run, default 30), TF_BATCHES (timed batches per tf.data run, default 92:
#            as many as saturate's 2 epochs of 3,000 photos, after 5 warm-up batches), S3 (1: the
#            S3 rows too; WEED, default .venv/bin/weed)
set -euo pipefail
cd "$(dirname "$0")/.."
SAT=build/ci/tools/saturate/saturate
[[ -x build-bench/tools/saturate/saturate ]] && SAT=build-bench/tools/saturate/saturate
SAT=${SATURATE_CLI:-$SAT}
TF_PY=${TF_PYTHON:-}
PY=${PYTHON:-.venv/bin/python}
PHOTOS=${1:-/tmp/saturate-bench-photos/train}
REPEATS=${2:-3}
THREADS=${THREADS:-$(nproc)}
WORKERS=${WORKERS:-"0 1 2 4"}
BATCHES=${BATCHES:-30}
TF_BATCHES=${TF_BATCHES:-92}
if [[ ! -d $PHOTOS ]]; then
  scripts/make-photo-dataset "$(dirname "$PHOTOS")" --train 1000 --val 0
fi
work=$(mktemp -d /tmp/saturate-formats-bench.XXXXXX)
source bench/seaweedfs.sh
trap 'stop_seaweedfs; rm -rf "$work"' EXIT

# The same photos as 4 WebDataset shards and 4 TFRecord files, labels from the class folders.
"$PY" - "$PHOTOS" "$work" <<'PY'
import os, sys
import webdataset as wds
from tfrecord import TFRecordWriter
root, out = sys.argv[1], sys.argv[2]
classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
files = [(os.path.join(root, c, f), i) for i, c in enumerate(classes)
         for f in sorted(os.listdir(os.path.join(root, c))) if f.lower().endswith((".jpg", ".jpeg"))]
for s in range(4):
    part = files[s::4]
    with wds.TarWriter(f"{out}/wds-{s}.tar") as sink:
        for k, (path, label) in enumerate(part):
            sink.write({"__key__": f"{s}-{k:06d}", "jpg": open(path, "rb").read(), "cls": label})
    writer = TFRecordWriter(f"{out}/tf-{s}.tfrecord")
    for path, label in part:
        writer.write({"image/encoded": (open(path, "rb").read(), "byte"),
                      "image/class/label": (label, "int")})
    writer.close()
print(f"formats_feed: {len(files)} photos in 4 WebDataset shards and 4 TFRecord files")
PY
# The first open of each makes its sidecar indexes: the offsets, then each JPEG's entry table.
"$PY" - "$SAT" "$work" <<'PY'
import resource, subprocess, sys, time
sat, work = sys.argv[1], sys.argv[2]
for name, pattern in (("WebDataset", "wds-{0..3}.tar"), ("TFRecord", "tf-*.tfrecord")):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sat, "inspect", f"{work}/{pattern}"], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"formats_feed: first open of the {name} files (indexes with JPEG tables): "
          f"{wall:.2f} s, {cpu:.2f} s of CPU")
PY
if [[ -n ${S3:-} ]]; then
  start_seaweedfs "$work/s3"
  make_bucket bench
  for s in 0 1 2 3; do s3curl -T "$work/wds-$s.tar" "$AWS_ENDPOINT_URL/bench/wds/wds-$s.tar" >/dev/null; done
  # The first open in place: one whole read of each object, its index and JPEG tables.
  export SATURATE_INDEX_DIR=$work/s3-index
  start=$(date +%s.%N)
  "$SAT" inspect "s3://bench/wds/wds-{0..3}.tar" >/dev/null
  echo "formats_feed: first open of the WebDataset objects in S3 (whole reads, indexes with JPEG" \
    "tables): $(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')") s"
fi
"$SAT" pack "$work/wds-{0..3}.tar" "$work/packed.sat" -q >/dev/null
"$SAT" pack "$work/wds-{0..3}.tar" "$work/packed-kept.sat" -q --keep-jpeg-bytes >/dev/null

feed() {  # MODE DATASET [FLAGS...]
  # To a file first: a Python reading a pipe would start up beside the timed run, on its cores.
  "$SAT" bench feed "$2" "${@:3}" --json --threads "$THREADS" --warmup 2 -b 64 --epochs 2 \
    -t image:crop=random,size=224 2>/dev/null >"$work/feed.json"
  "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({'mode': '$1', 'images_per_s': j['images_per_s'], 'cpu_ms_per_image': 1e3 * j['cpu_cores_used'] * j['elapsed_s'] / j['samples']}))" \
    "$work/feed.json" >>"$work/results.jsonl"
}
torch_feed() {  # WORKERS [SHARDS MODE]
  "$PY" - "$1" "$BATCHES" "${2:-$work/wds-{0..3\}.tar}" "${3:-webdataset+DataLoader}" \
    <<'PY' >>"$work/results.jsonl"
import json, sys, time
import torch, webdataset as wds
from torchvision import transforms as T
workers, batches, shards, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.set_num_threads(1)
tf = T.Compose([T.RandomResizedCrop(224), T.PILToTensor()])
ds = (wds.WebDataset(shards, shardshuffle=False).shuffle(256)
      .decode("pil").to_tuple("jpg", "cls").map_tuple(tf, lambda y: y))
loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=workers)
n, start, it = 0, None, iter(loader)
for b in range(batches + 2):
    try:
        x, _ = next(it)
    except StopIteration:
        it = iter(loader)
        x, _ = next(it)
    if b == 1:
        start = time.perf_counter()  # after warm-up (workers started, first batches)
    elif b > 1:
        n += x.shape[0]
print(json.dumps({"mode": f"{mode} w={workers}",
                  "images_per_s": n / (time.perf_counter() - start)}))
PY
}
for _ in $(seq "$REPEATS"); do
  feed "saturate direct WebDataset" "$work/wds-{0..3}.tar"
  feed "saturate direct TFRecord" "$work/tf-*.tfrecord"
  if [[ -n $TF_PY ]]; then
    "$TF_PY" bench/tfdata_feed.py "$work/tf-*.tfrecord" "$THREADS" "$TF_BATCHES" 2>/dev/null \
      >>"$work/results.jsonl"
    # The same pipeline resizing as saturate does (antialiased): equal work per image.
    "$TF_PY" bench/tfdata_feed.py "$work/tf-*.tfrecord" "$THREADS" "$TF_BATCHES" 5 --antialias \
      2>/dev/null >>"$work/results.jsonl"
    # decode_jpeg of the whole image, then the crop (the slim/Inception preprocessing).
    "$TF_PY" bench/tfdata_feed.py "$work/tf-*.tfrecord" "$THREADS" "$TF_BATCHES" 5 --decode-full \
      2>/dev/null >>"$work/results.jsonl"
  fi
  feed "saturate packed" "$work/packed.sat"
  feed "saturate packed, JPEG bytes kept" "$work/packed-kept.sat"
  for w in $WORKERS; do torch_feed "$w"; done
  if [[ -n ${S3:-} ]]; then
    feed "saturate WebDataset in place, S3" "s3://bench/wds/wds-{0..3}.tar"
    feed "saturate WebDataset in place, S3, block shuffle" "s3://bench/wds/wds-{0..3}.tar" \
      --block-shuffle
    rm -rf "$work/cache"
    feed "saturate WebDataset in place, S3, cache (cold)" "s3://bench/wds/wds-{0..3}.tar" \
      --cache-dir "$work/cache"
    for w in $WORKERS; do
      torch_feed "$w" "pipe:curl -sf --aws-sigv4 aws:amz:us-east-1:s3 -u bench:bench $AWS_ENDPOINT_URL/bench/wds/wds-{0..3}.tar" \
        "webdataset+DataLoader, S3 (pipe:curl)"
    done
  fi
done
"$PY" - "$work/results.jsonl" "$THREADS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
modes = list(dict.fromkeys(r["mode"] for r in rows))
rate = {m: statistics.median(r["images_per_s"] for r in rows if r["mode"] == m) for m in modes}
print(f"RRC-224, batch 64, saturate --threads {sys.argv[2]}; median of "
      f"{len(rows) // len(modes)} run(s)")
cpu = {m: statistics.median(r["cpu_ms_per_image"] for r in rows if r["mode"] == m)
       for m in modes if all("cpu_ms_per_image" in r for r in rows if r["mode"] == m)}
for m in modes:
    print(f"  {m:<34} {rate[m]:>8.1f} images/s" +
          (f"  {cpu[m]:.2f} CPU ms/image" if m in cpu else ""))
torch_best = max(v for m, v in rate.items() if m.startswith("webdataset+DataLoader w="))
direct, packed = rate["saturate direct WebDataset"], rate["saturate packed"]
print(f"direct WebDataset / best webdataset+DataLoader: {direct / torch_best:.2f}x")
print(f"direct WebDataset / packed: {direct / packed:.0%}; "
      f"direct TFRecord / packed: {rate['saturate direct TFRecord'] / packed:.0%}")
kept = rate["saturate packed, JPEG bytes kept"]
print(f"the same JPEG bytes (packed --keep-jpeg-bytes): direct WebDataset {direct / kept:.0%}, "
      f"direct TFRecord {rate['saturate direct TFRecord'] / kept:.0%}")
s3 = "saturate WebDataset in place, S3"
if s3 in rate:
    s3_best = max(v for m, v in rate.items() if m.startswith("webdataset+DataLoader, S3"))
    for m in (s3, s3 + ", block shuffle", s3 + ", cache (cold)"):
        print(f"{m} / best webdataset+DataLoader (pipe:curl): {rate[m] / s3_best:.2f}x; "
              f"/ direct from disk: {rate[m] / direct:.0%}")
d = "saturate direct TFRecord"
for t, what in (("tf.data (AUTOTUNE)", "its default resize (bilinear, not antialiased)"),
                ("tf.data (AUTOTUNE), antialias", "resizing as saturate does (antialiased)"),
                ("tf.data (AUTOTUNE), decode_jpeg + slice",
                 "decode_jpeg of the whole image, then the crop (default resize)")):
    if t in rate:
        print(f"direct TFRecord / tf.data with {what}: {rate[d] / rate[t]:.2f}x images/s, "
              f"{cpu[t] / cpu[d]:.2f}x less CPU per image")
PY
