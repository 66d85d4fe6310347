#!/usr/bin/env python3
"""saturate.Loader (Python) against the C++ loader (`saturate bench feed`), side by side.

The binding must not be the bottleneck: the bar is >= 90% of the C++ loader's
samples/s on the input-pipeline bars' workloads. Each round runs the C++ tool
and then the Python loop over the same dataset with the same options; rounds
alternate so machine noise hits both alike. The Python loop only takes each
batch, as `bench feed` does; the tensors are torch tensors (zero-copy views).

usage: bench/python_vs_cpp.py [--data data] [--rounds 3] [--epochs 2] [--json]
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import saturate
from saturate import transforms as T

WORKLOADS = {
    # name: (dataset, batch, {field: transform})
    "photos uint8 RandomResizedCrop(224)+flip, batch 64": (
        "photos-train.sat", 64, {"image": [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]}),
    "fashion-mnist float normalized, batch 256": (
        "fashion-mnist-train.sat", 256, {"image": [T.ToDtype("float32"), T.Normalize(0.2860, 0.3530)]}),
}
WARMUP_BATCHES = 2  # as bench feed's default


def run_cpp(dataset, batch, transforms, epochs, threads):
    exe = os.path.join(os.path.dirname(saturate.__file__), "bin", "saturate")
    args = [exe, "bench", "feed", dataset, "--batch", str(batch), "--epochs", str(epochs),
            "--threads", threads, "--json"]
    for field, t in transforms.items():
        args += ["-t", T.field_spec(field, t)]
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["images_per_s"]


def run_python(dataset, batch, transforms, epochs, threads):
    loader = saturate.Loader(dataset, batch, transforms=transforms,
                             threads=threads if threads == "auto" else int(threads))
    batches = samples = 0
    start = time.perf_counter()
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for b in loader:
            batches += 1
            if batches == WARMUP_BATCHES:
                start = time.perf_counter()
            elif batches > WARMUP_BATCHES:
                samples += len(b["label"])
    return samples / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="data")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", default="auto")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    results = []
    for name, (dataset, batch, transforms) in WORKLOADS.items():
        path = os.path.join(args.data, dataset)
        cpp, py = [], []
        for _ in range(args.rounds):
            cpp.append(run_cpp(path, batch, transforms, args.epochs, args.threads))
            py.append(run_python(path, batch, transforms, args.epochs, args.threads))
        ratios = [p_ / c for p_, c in zip(py, cpp)]
        results.append({"workload": name, "cpp_samples_per_s": cpp, "python_samples_per_s": py,
                        "ratio_median": statistics.median(ratios)})
        if not args.json:
            print(f"{name}\n  C++    {' '.join(f'{v:9.0f}' for v in cpp)} samples/s\n"
                  f"  Python {' '.join(f'{v:9.0f}' for v in py)} samples/s\n"
                  f"  Python / C++ (median of rounds): {statistics.median(ratios):.3f}")
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
