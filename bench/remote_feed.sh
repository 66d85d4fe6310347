#!/usr/bin/env bash
# RRC-224 photo feed from a local S3 server (SeaweedFS) against the same dataset on local
# disk: images/s with no cache, with a cold cache and with a warm cache, and the bytes
# fetched per epoch. docs/benchmarks.md, "Remote datasets (issue 22)", has the results.
#
# usage: bench/remote_feed.sh [DATASET] [REPEATS]
#   DATASET  a packed photo dataset (default /tmp/saturate-bench-data/photos.sat, which
#            bench/run.sh makes with scripts/make-photo-dataset)
#   env      SATURATE_CLI (default build/ci/tools/saturate/saturate), WEED (default .venv/bin/weed),
#            THREADS (default 2), PHOTOS (the ImageFolder DATASET was packed from; default
#            /tmp/saturate-bench-data/photos/train) and MOSAIC_PYTHON (a python with
#            mosaicml-streaming, boto3 and torchvision, e.g. .venv-torch2/bin/python): with it,
#            Mosaic Streaming + DataLoader reads the same photos from the same server
#            (bench/mosaic_feed.py), timed over whole epochs as saturate's "-whole" modes are.
set -euo pipefail
cd "$(dirname "$0")/.."
SAT=${SATURATE_CLI:-build/ci/tools/saturate/saturate}
WEED=${WEED:-.venv/bin/weed}
DS=${1:-/tmp/saturate-bench-data/photos.sat}
REPEATS=${2:-3}
THREADS=${THREADS:-2}
work=$(mktemp -d /tmp/saturate-remote-bench.XXXXXX)
source bench/seaweedfs.sh
start_seaweedfs "$work" "$WEED"
cleanup() {
  stop_seaweedfs
  rm -rf "$work"
}
trap cleanup EXIT
make_bucket bench
# Upload with plain curl: shards first, manifest last.
for f in "$DS"/*.srec "$DS"/manifest.json; do
  s3curl -T "$f" "$AWS_ENDPOINT_URL/bench/photos/$(basename "$f")" >/dev/null
done
URL=s3://bench/photos
feed() {  # MODE DATASET [FLAGS...] (--warmup 2 unless FLAGS give one)
  local mode=$1; shift
  local warmup=(--warmup 2)
  [[ " $* " == *" --warmup "* ]] && warmup=()
  "$SAT" bench feed "${warmup[@]}" "$@" --json --threads "$THREADS" -b 64 \
    -t image:crop=random,size=224 2>/dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin); j['mode']='$mode'; print(json.dumps(j))" \
    >>"$work/results.jsonl"
}
if [[ -n ${MOSAIC_PYTHON:-} ]]; then s3curl -X PUT "$AWS_ENDPOINT_URL/mosaic" >/dev/null; fi
for r in $(seq "$REPEATS"); do
  feed local "$DS"
  feed s3-nocache "$URL"
  feed s3-nocache-block "$URL" --block-shuffle
  rm -rf "$work/cache"
  feed s3-cache-cold "$URL" --cache-dir "$work/cache"
  feed s3-cache-warm "$URL" --cache-dir "$work/cache"
  if [[ -n ${MOSAIC_PYTHON:-} ]]; then  # whole epochs, startup included, as Mosaic's are timed
    rm -rf "$work/cache"
    feed s3-cold-whole "$URL" --cache-dir "$work/cache" --warmup 0
    feed s3-warm-whole "$URL" --cache-dir "$work/cache" --warmup 0
    "$MOSAIC_PYTHON" bench/mosaic_feed.py "${PHOTOS:-/tmp/saturate-bench-data/photos/train}" \
      --bucket mosaic --workers 1,2 >>"$work/results.jsonl"
  fi
done
# Bytes per epoch in the steady state: a run also counts its read-ahead past its last epoch
# (up to 64 MiB), so take the difference between a 4-epoch and a 2-epoch run.
feed s3-nocache-2-epochs "$URL" --epochs 2
feed s3-nocache-4-epochs "$URL" --epochs 4
feed s3-block-2-epochs "$URL" --epochs 2 --block-shuffle
feed s3-block-4-epochs "$URL" --epochs 4 --block-shuffle
bytes=$(python3 -c "import json; m=json.load(open('$DS/manifest.json')); print(sum(s['bytes'] for s in m['shards']))")
python3 - "$work/results.jsonl" "$bytes" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
size = int(sys.argv[2])
modes = ["local", "s3-nocache", "s3-nocache-block", "s3-cache-cold", "s3-cache-warm"]
rate = {m: statistics.median(r["images_per_s"] for r in rows if r["mode"] == m) for m in modes}
print(f"dataset: {size / 2**20:.1f} MiB, {rows[0]['samples']} samples timed per run, "
      f"{sum(r['mode'] == 'local' for r in rows)} runs per mode (median)")
print(f"{'mode':<17} {'images/s':>9} {'vs local':>9} {'fetched/epoch':>14} {'requests':>9} {'cache hit':>9}")
for m in modes:
    rs = [r for r in rows if r["mode"] == m]
    rem = rs[-1].get("remote", {})
    fetched = rem.get("bytes_fetched", 0)
    blocks = rem.get("cache_hits", 0) + rem.get("cache_misses", 0)
    hit = f"{100 * rem['cache_hits'] / blocks:.0f}%" if blocks else "-"
    print(f"{m:<17} {rate[m]:>9.1f} {rate[m] / rate['local']:>8.1%} "
          f"{fetched / size:>13.3f}x {rem.get('requests', 0):>9} {hit:>9}")
def fetched(mode):
    return next(r["remote"]["bytes_fetched"] for r in rows if r["mode"] == mode)
mosaic = [r for r in rows if r["mode"].startswith("mosaic")]
failed = [r for r in mosaic if r["mode"].endswith("-failed")]
if failed:
    print(f"\nMosaic Streaming epochs that failed (not timed): {len(failed)} of {len(mosaic)}")
if mosaic:
    print("\nwhole epochs (startup included), same server, same cores:")
    for temp in ("cold", "warm"):
        ours = statistics.median(r["images_per_s"] for r in rows if r["mode"] == f"s3-{temp}-whole")
        by_w = {}
        for r in mosaic:
            if r["mode"] == f"mosaic-{temp}":
                by_w.setdefault(r["workers"], []).append(r["images_per_s"])
        w, theirs = max(((w, statistics.median(v)) for w, v in by_w.items()), key=lambda t: t[1])
        print(f"  {temp}: saturate {ours:.1f} images/s, Mosaic Streaming + DataLoader "
              f"{theirs:.1f} (best: num_workers={w}; all: "
              f"{', '.join(f'{k}: {statistics.median(v):.1f}' for k, v in sorted(by_w.items()))})"
              f" -> {ours / theirs:.2f}x")
for name, m in (("global shuffle", "s3-nocache"), ("block shuffle", "s3-block")):
    per_epoch = (fetched(f"{m}-4-epochs") - fetched(f"{m}-2-epochs")) / 2
    print(f"no cache, {name}: {per_epoch / size:.3f}x the dataset fetched per epoch "
          f"(4-epoch run minus 2-epoch run, halved)")
PY
