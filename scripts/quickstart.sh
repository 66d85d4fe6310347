#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, build and install
# the Python package (engine, module and CLI) into .venv, make the sample data,
# pack it, verify it, feed it through the loader, train on it fed by saturate
# and by torch's DataLoader in turn, and print a summary.
#   - a photo dataset (JPEGs cut from Debian's wallpapers) -> data/photos
#   - packed (ImageFolder)                                  -> data/photos-{train,val}.sat
#   - Fashion-MNIST from Debian's dataset-fashion-mnist      -> data/fashion-mnist-{train,test}.sat
# usage: scripts/quickstart.sh   (PHOTOS_TRAIN=1000 PHOTOS_VAL=100 by default)
set -euo pipefail
source "$(dirname "$0")/common.sh"
PHOTOS_TRAIN=${PHOTOS_TRAIN:-1000}
PHOTOS_VAL=${PHOTOS_VAL:-100}
FMNIST=/usr/share/datasets/fashion-mnist
FMNIST_CLASSES="T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"

step "dependencies"
scripts/install-deps.sh

step "build and install the Python package into .venv (pip install .; the CLI comes with it)"
scripts/python-env.sh .venv
sat=.venv/bin/saturate
$sat devices

step "sample photos"
if [[ ! -d data/photos/train ]]; then
  scripts/make-photo-dataset data/photos --train "$PHOTOS_TRAIN" --val "$PHOTOS_VAL"
else
  echo "data/photos exists; keeping it"
fi

step "pack"
$sat pack folder data/photos/train data/photos-train.sat --force
$sat pack folder data/photos/val data/photos-val.sat --force
$sat pack idx "$FMNIST/train-images-idx3-ubyte.gz" "$FMNIST/train-labels-idx1-ubyte.gz" \
  data/fashion-mnist-train.sat --class-names "$FMNIST_CLASSES" --force
$sat pack idx "$FMNIST/t10k-images-idx3-ubyte.gz" "$FMNIST/t10k-labels-idx1-ubyte.gz" \
  data/fashion-mnist-test.sat --class-names "$FMNIST_CLASSES" --force

step "verify"
datasets=(data/photos-train.sat data/photos-val.sat data/fashion-mnist-train.sat data/fashion-mnist-test.sat)
for d in "${datasets[@]}"; do $sat verify "$d"; done

step "feed (the loader, as a training job would read them)"
$sat bench feed data/photos-train.sat --batch 64 --epochs 2 -t image:crop=random,size=224,flip=0.5
$sat bench feed data/fashion-mnist-train.sat --batch 256 --epochs 3 \
  -t image:to-float,mean=0.2860,std=0.3530

step "train on CPU: fed by saturate, then by torch's DataLoader (examples/compare.py), under saturate watch"
$sat watch --no-view --out runs/quickstart-train -- .venv/bin/python examples/compare.py --data data

step "doctor: why training waits (the input-bound linear model, fed by torch's DataLoader, then by saturate)"
for loader in torch saturate; do
  $sat doctor --out runs/quickstart-doctor-$loader -- .venv/bin/python \
    examples/train_fashion_mnist.py --model linear --loader $loader --max-steps 200 --data data
done

step "summary"
printf '%-30s %9s %10s %7s  %s\n' dataset records size shards schema
for d in "${datasets[@]}"; do
  $sat inspect --json "$d" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print("%-30s %9d %8.1fMB %7d  %s" % (j["dataset"], j["records"], j["bytes"] / 1e6, j["shards"], ", ".join(j["schema"])))'
done
echo
echo "done: inspect one with  $sat inspect data/photos-train.sat"
echo "      what training did to CPU and memory: runs/quickstart-train/samples.jsonl (docs/watch.md)"
echo "      doctor's reports: runs/quickstart-doctor-torch/report.html, runs/quickstart-doctor-saturate/report.html"
echo "      use it from Python:  source .venv/bin/activate; python -c 'import saturate'  (docs/python.md)"
