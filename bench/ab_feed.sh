#!/usr/bin/env bash
# Alternating A/B runs of `saturate bench feed`: each round runs every
# configuration once, in turn, so that load from outside hits them alike; then
# it prints each configuration's median and best samples/s. This VM's rates move
# by +-20% from minute to minute, so single runs cannot tell a 5% change apart;
# docs/benchmarks.md compares medians of 10-20 rounds.
#
# usage: bench/ab_feed.sh ROUNDS DATASET CONFIG...
#   CONFIG  "SATURATE_BINARY [bench feed options...]", e.g. two builds with the
#           same options, or one build with two option sets:
#     bench/ab_feed.sh 20 /tmp/saturate-bench-data/fmnist.sat \
#       "/tmp/sat-before --threads 2 -b 256" "/tmp/sat-after --threads 2 -b 256"
#   Every run adds: --warmup 2 --epochs 10, and, unless the config gives its own
#   -t, the Fashion-MNIST transform -t image:to-float,mean=0.2860,std=0.3530.
set -euo pipefail

if [[ $# -lt 3 || $1 == -h || $1 == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
rounds=$1 dataset=$2
shift 2
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ab_feed.sh: ROUNDS must be a positive integer" >&2; exit 2; }
[[ -e $dataset ]] || { echo "ab_feed.sh: no dataset at $dataset" >&2; exit 2; }

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((i = 1; i <= rounds; ++i)); do
  for config in "$@"; do
    read -r -a argv <<<"$config"
    transform=(-t "image:to-float,mean=0.2860,std=0.3530")
    [[ " $config " == *" -t "* ]] && transform=()
    # To a variable first: a reader on a pipe would start beside the timed run.
    out=$("${argv[0]}" bench feed "$dataset" --warmup 2 --epochs 10 "${transform[@]}" \
      "${argv[@]:1}" --json)
    rate=$(sed -n 's/.*"images_per_s": *\([0-9.e+]*\).*/\1/p' <<<"$out")
    [[ -n $rate ]] || { echo "ab_feed.sh: no images_per_s from: $config" >&2; exit 1; }
    printf '%s\t%s\n' "$config" "$rate" >>"$results"
  done
done
python3 - "$results" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    config, rate = line.rstrip("\n").split("\t")
    runs[config].append(float(rate))
first = None
for config, r in runs.items():
    med = statistics.median(r)
    first = first or med
    print(f"median {med / 1e6:8.3f} M  best {max(r) / 1e6:8.3f} M  "
          f"x first {med / first:5.3f}  n={len(r)}  {config}")
PY
