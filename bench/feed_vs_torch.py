#!/usr/bin/env python3
"""saturate's loader vs torch.utils.data.DataLoader, same files, same cores, one run.

Driven by bench/feed_vs_torch.sh (which builds the binaries and the datasets);
needs torch, torchvision, pillow and numpy (pip install torch torchvision pillow).

  A. Photos (ImageFolder of JPEGs, packed with `saturate pack folder`):
     RandomResizedCrop(224) + RandomHorizontalFlip, batch 64, uint8 and
     ToTensor+Normalize(ImageNet) float32.
       torch:    ImageFolder + DataLoader(shuffle=True, num_workers=w,
                 persistent_workers=False), one epoch per w, timed from the
                 first batch to the end of the epoch (images after the first
                 batch / that time). uint8 for every w in TORCH_WORKERS,
                 float for FLOAT_WORKERS plus the best uint8 w.
       saturate: `saturate bench feed --batch 64 --epochs 2` (its timing
                 skips the first 2 batches), threads auto and 2.
       bounds:   bench/decode_bound (libjpeg-turbo full decode through
                 saturate::image::DecodeRgb, files pre-read, 2 threads) and
                 PIL Image.open().convert('RGB') over the files in a
                 multiprocessing Pool(2).
     The head-to-head pairs (torch at its best w vs saturate at threads auto
     and 2, uint8 and float, and the two decode bounds) are run REPEATS times
     (default 3), alternating, so that load from other processes hits both
     sides alike; the table reports the best images/s of each and the lowest
     CPU time per image (the load-independent cost).
  B. Fashion-MNIST (IDX, packed with `saturate pack idx`): batch 256,
     float (x/255 - 0.2860)/0.3530.
       torch:    a tensor-backed Dataset (IDX loaded once into a uint8
                 tensor, per-sample float/normalize in __getitem__),
                 DataLoader(shuffle=True, num_workers=w), w in FMNIST_WORKERS.
       saturate: `saturate bench feed --batch 256 --epochs 5` at threads auto
                 and 2 (as for the photos; a 5-epoch run is shorter than
                 the autotuner's first decision, so auto stays at 1 thread).
  C. Max RSS of `saturate bench feed` over 10 photo epochs (/usr/bin/time -v)
     vs batch_bytes x (prefetch + max_held_batches) + dataset mapping +
     decode scratch + the process's own baseline.

CPU per image: for saturate the process CPU time over its timed window; for
torch (RUSAGE_SELF + RUSAGE_CHILDREN) over the whole epoch, worker start-up
included (the workers are reaped at the end of each epoch).
"""

import argparse
import gzip
import io
import json
import multiprocessing
import os
import platform
import re
import resource
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets, transforms

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530
PHOTO_BATCH, FMNIST_BATCH = 64, 256
MAX_HELD_BATCHES = 2  # LoaderOptions default, used by `saturate bench feed`


# num_workers > cores is part of the sweep on purpose.
warnings.filterwarnings("ignore", message="This DataLoader will create")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def ints(text):
    return [int(x) for x in text.replace(",", " ").split()]


class LoadSampler:
    """Samples the 1-minute load average every `period` seconds."""

    def __init__(self, period=2.0):
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)

    def _run(self, period):
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def summary(self):
        s = self.samples or [os.getloadavg()[0]]
        return {"min": min(s), "mean": sum(s) / len(s), "max": max(s), "samples": len(s)}


def cpu_seconds():
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


# ---------------------------------------------------------------- torch side

def time_epoch(dataset, batch_size, workers, seed=0):
    """One epoch; rate = images after the first batch / time after the first batch."""
    g = torch.Generator()
    g.manual_seed(seed)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                        persistent_workers=False, generator=g)
    cpu0 = cpu_seconds()
    t_start = time.perf_counter()
    it = iter(loader)
    first = next(it)
    t0 = time.perf_counter()
    images = 0
    total = len(first[0])
    for x, _ in it:
        images += len(x)
    t1 = time.perf_counter()
    del it  # shuts the workers down (already done at exhaustion)
    cpu = cpu_seconds() - cpu0
    total += images
    return {"num_workers": workers, "images_per_s": images / (t1 - t0), "images_timed": images,
            "elapsed_s": t1 - t0, "first_batch_s": t0 - t_start,
            "cpu_s_per_image": cpu / total, "cpu_cores_used": cpu / (t1 - t_start),
            "dtype": str(first[0].dtype),
            "shape": list(first[0].shape)}


def photo_transform(kind):
    head = [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip()]
    if kind == "uint8":
        return transforms.Compose(head + [transforms.PILToTensor()])
    return transforms.Compose(head + [transforms.ToTensor(),
                                      transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class FashionMnist(Dataset):
    """The usual tensor-backed Dataset: IDX loaded once, per-sample float + normalize."""

    def __init__(self, images_gz, labels_gz):
        self.images = torch.from_numpy(read_idx(images_gz).copy())  # uint8 [N, 28, 28]
        self.labels = torch.from_numpy(read_idx(labels_gz).astype(np.int64))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i].float().div(255).sub(FMNIST_MEAN).div(FMNIST_STD).unsqueeze(0)
        return img, self.labels[i]


def _pil_decode(path):
    with Image.open(path) as im:
        rgb = im.convert("RGB")
    return rgb.size[0] * rgb.size[1]


def pil_decode_rate(paths, procs):
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(procs) as pool:
        pool.map(_pil_decode, paths[:32], chunksize=4)  # start-up and warm-up, untimed
        cpu0 = cpu_seconds()
        t0 = time.perf_counter()
        pixels = sum(pool.imap_unordered(_pil_decode, paths, chunksize=16))
        t1 = time.perf_counter()
    cpu = cpu_seconds() - cpu0  # the pool's workers are reaped on exit
    return {"processes": procs, "images": len(paths), "elapsed_s": t1 - t0,
            "images_per_s": len(paths) / (t1 - t0), "megapixels_per_s": pixels / (t1 - t0) / 1e6,
            "cpu_s_per_image": cpu / len(paths), "cpu_cores_used": cpu / (t1 - t0)}


# ------------------------------------------------------------- saturate side

def run_json(cmd):
    log("  $ " + " ".join(cmd))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def saturate_feed(sat, dataset, batch, epochs, transform, threads="auto"):
    j = run_json([sat, "bench", "feed", dataset, "--batch", str(batch), "--epochs", str(epochs),
                  "--threads", str(threads), "-t", transform, "--json"])
    j["threads_flag"] = str(threads)
    j["cpu_s_per_image"] = j["cpu_cores_used"] * j["elapsed_s"] / max(1, j["samples"])
    return j


def time_v(cmd):
    """Runs cmd under /usr/bin/time -v; returns (stdout, max RSS in bytes, wall s)."""
    log("  $ /usr/bin/time -v " + " ".join(cmd))
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, check=True, capture_output=True, text=True)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) * 1024
    return p.stdout, rss, p.stderr


# ----------------------------------------------------------------- the run

def image_files(root):
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.join(d, f) for f in files if f.lower().endswith((".jpg", ".jpeg", ".png"))]
    return sorted(out)


def best(runs):
    return max(runs, key=lambda r: r["images_per_s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--saturate", required=True)
    ap.add_argument("--decode-bound", required=True)
    ap.add_argument("--photos", required=True, help="ImageFolder root (the train split)")
    ap.add_argument("--photos-sat", required=True)
    ap.add_argument("--fmnist-images", required=True)
    ap.add_argument("--fmnist-labels", required=True)
    ap.add_argument("--fmnist-sat", required=True)
    ap.add_argument("--out", required=True, help="JSON results file")
    ap.add_argument("--skip-rss", action="store_true")
    args = ap.parse_args()

    workers = ints(os.environ.get("TORCH_WORKERS", "0 1 2 3 4"))
    float_workers = ints(os.environ.get("FLOAT_WORKERS", "2 3"))
    fmnist_workers = ints(os.environ.get("FMNIST_WORKERS", "0 1 2"))
    repeats = int(os.environ.get("REPEATS", "3"))
    cores = os.cpu_count()
    photo_t_u8 = "image:crop=random,size=224,flip=0.5"
    photo_t_f32 = photo_t_u8 + ",dtype=float32,normalize"
    fmnist_t = f"image:to-float,mean={FMNIST_MEAN:.4f},std={FMNIST_STD:.4f}"

    res = {"machine": {"cores": cores, "platform": platform.platform(),
                       "python": platform.python_version(), "torch": torch.__version__,
                       "torchvision": torchvision.__version__,
                       "pillow": Image.__version__, "torch_threads": torch.get_num_threads()},
           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "settings": {"torch_workers": workers, "float_workers": float_workers,
                        "fmnist_workers": fmnist_workers, "repeats": repeats}}
    t_run = time.perf_counter()
    with LoadSampler() as load:
        # ---------------------------------------------------------- A: photos
        paths = image_files(args.photos)
        log(f"== A. photos: {len(paths)} images in {args.photos}")
        ds_u8 = datasets.ImageFolder(args.photos, transform=photo_transform("uint8"))
        ds_f32 = datasets.ImageFolder(args.photos, transform=photo_transform("float"))

        def bounds():
            d = run_json([args.decode_bound, "--threads", "2", "--passes", "2", args.photos])
            d["cpu_s_per_image"] = d["cpu_s"] / (d["images"] * d["passes"])
            q = pil_decode_rate(paths, 2)
            log(f"   decode only: libjpeg-turbo full decode, 2 threads: {d['images_per_s']:.0f} "
                f"img/s; PIL decode, Pool(2): {q['images_per_s']:.0f} img/s")
            return d, q

        def sat_photo(transform, threads):
            return saturate_feed(args.saturate, args.photos_sat, PHOTO_BATCH, 2, transform, threads)

        log("-- round 1: decode-only bounds, torch sweeps, saturate")
        d, q = bounds()
        dec_runs, pil_runs = [d], [q]
        log("   torch uint8 sweep: num_workers " + " ".join(map(str, workers)))
        sweep_u8 = []
        for w in workers:
            r = time_epoch(ds_u8, PHOTO_BATCH, w)
            log(f"   num_workers={w}: {r['images_per_s']:.0f} img/s")
            sweep_u8.append(r)
        w_u8 = best(sweep_u8)["num_workers"]
        fw = sorted(set(float_workers) | {w_u8})
        log("   torch float sweep: num_workers " + " ".join(map(str, fw)))
        sweep_f32 = []
        for w in fw:
            r = time_epoch(ds_f32, PHOTO_BATCH, w)
            log(f"   num_workers={w}: {r['images_per_s']:.0f} img/s")
            sweep_f32.append(r)
        w_f32 = best(sweep_f32)["num_workers"]
        torch_u8 = [r for r in sweep_u8 if r["num_workers"] == w_u8]
        torch_f32 = [r for r in sweep_f32 if r["num_workers"] == w_f32]
        sat = {(k, t): [sat_photo(tr, t)] for k, tr in (("uint8", photo_t_u8),
                                                          ("float", photo_t_f32))
               for t in ("auto", "2")}
        for i in range(1, repeats):
            log(f"-- round {i + 1}/{repeats}: the same pairs again (torch num_workers "
                f"{w_u8} uint8, {w_f32} float)")
            d, q = bounds()
            dec_runs.append(d)
            pil_runs.append(q)
            torch_u8.append(time_epoch(ds_u8, PHOTO_BATCH, w_u8, seed=i))
            for t in ("auto", "2"):
                sat[("uint8", t)].append(sat_photo(photo_t_u8, t))
            torch_f32.append(time_epoch(ds_f32, PHOTO_BATCH, w_f32, seed=i))
            for t in ("auto", "2"):
                sat[("float", t)].append(sat_photo(photo_t_f32, t))
        dec, pil = best(dec_runs), best(pil_runs)
        res["photos"] = {
            "images": len(paths), "batch": PHOTO_BATCH,
            "decode_bound_libjpeg_runs": dec_runs, "decode_pil_pool2_runs": pil_runs,
            "torch_uint8_sweep": sweep_u8, "torch_float_sweep": sweep_f32,
            "torch_uint8_best_runs": torch_u8, "torch_float_best_runs": torch_f32,
            "saturate_runs": {f"{k}_threads_{t}": v for (k, t), v in sat.items()},
            "transform_uint8": photo_t_u8, "transform_float": photo_t_f32}

        # -------------------------------------------------- B: Fashion-MNIST
        log("== B. Fashion-MNIST")
        fm = FashionMnist(args.fmnist_images, args.fmnist_labels)
        fm_sweep = []
        for w in fmnist_workers:
            r = time_epoch(fm, FMNIST_BATCH, w)
            log(f"   num_workers={w}: {r['images_per_s']:.0f} img/s")
            fm_sweep.append(r)
        w_fm = best(fm_sweep)["num_workers"]
        fm_torch = [r for r in fm_sweep if r["num_workers"] == w_fm]
        fm_sat = {t: [] for t in ("auto", "2")}
        for i in range(repeats):
            if i > 0:
                fm_torch.append(time_epoch(fm, FMNIST_BATCH, w_fm, seed=i))
            for t in fm_sat:
                fm_sat[t].append(saturate_feed(args.saturate, args.fmnist_sat, FMNIST_BATCH, 5,
                                               fmnist_t, t))
        res["fmnist"] = {"images": len(fm), "batch": FMNIST_BATCH, "torch_sweep": fm_sweep,
                         "torch_best_runs": fm_torch,
                         "saturate_runs": {f"threads_{t}": v for t, v in fm_sat.items()},
                         "transform": fmnist_t}

        # -------------------------------------------------------------- C: RSS
        if not args.skip_rss:
            log("== C. max RSS over 10 photo epochs")
            _, base_rss, _ = time_v([args.saturate, "--version"])
            out, rss, _ = time_v([args.saturate, "bench", "feed", args.photos_sat, "--batch",
                                  str(PHOTO_BATCH), "--epochs", "10", "-t", photo_t_u8, "--json"])
            j = json.loads(out)
            batch_bytes = PHOTO_BATCH * 3 * 224 * 224 + PHOTO_BATCH * 8  # image + int64 label
            mapping = sum(os.path.getsize(os.path.join(args.photos_sat, f))
                          for f in os.listdir(args.photos_sat))
            max_w = max_h = max_px = 0
            for p in paths:
                with Image.open(p) as im:
                    w, h = im.size
                max_w, max_h, max_px = max(max_w, w), max(max_h, h), max(max_px, w * h)
            # Per thread: the largest decoded region (RGB8, at most the full image), the
            # resampler's float rows (224 wide x 3 x 4 B per source row, at most max_h rows),
            # libjpeg's own state (~1 MiB allowance).
            scratch = j["threads"] * (max_px * 3 + 224 * 3 * 4 * max_h + (1 << 20))
            buffers = batch_bytes * (j["prefetch"] + MAX_HELD_BATCHES)
            bound = buffers + mapping + scratch + base_rss
            res["rss"] = {"max_rss_bytes": rss, "baseline_rss_bytes": base_rss,
                          "batch_bytes": batch_bytes, "prefetch": j["prefetch"],
                          "max_held_batches": MAX_HELD_BATCHES, "threads": j["threads"],
                          "buffers_bytes": buffers, "mapping_bytes": mapping,
                          "scratch_bytes_est": scratch, "largest_image": [max_w, max_h],
                          "bound_bytes": bound, "within_bound": rss <= bound,
                          "ten_epoch_images_per_s": j["images_per_s"], "feed": j}
    res["load_average_1min"] = load.summary()
    res["wall_s"] = time.perf_counter() - t_run

    # ---------------------------------------------------------------- report
    # Wall rates: the best run of each configuration. CPU per image: the lowest
    # over the same runs (the load-independent measure of cost).
    def summary(rs):
        b = best(rs)
        return {"images_per_s": b["images_per_s"], "cores": b["cpu_cores_used"],
                "cpu_s_per_image": min(r["cpu_s_per_image"] for r in rs),
                "runs": [r["images_per_s"] for r in rs], "threads": b.get("threads")}

    p = res["photos"]
    t_u8, t_f32 = summary(torch_u8), summary(torch_f32)
    s_cfg = {key: summary(v) for key, v in sat.items()}
    s_u8 = max((s_cfg[("uint8", t)] for t in ("auto", "2")), key=lambda x: x["images_per_s"])
    s_f32 = max((s_cfg[("float", t)] for t in ("auto", "2")), key=lambda x: x["images_per_s"])
    d_sum, pil_sum = summary(dec_runs), summary(pil_runs)
    t_fm = summary(fm_torch)
    s_fm_cfg = {t: summary(v) for t, v in fm_sat.items()}
    s_fm = max(s_fm_cfg.values(), key=lambda x: x["images_per_s"])
    ratios = {
        "photo_uint8_saturate_over_torch": s_u8["images_per_s"] / t_u8["images_per_s"],
        "photo_float_saturate_over_torch": s_f32["images_per_s"] / t_f32["images_per_s"],
        "photo_uint8_saturate_auto_over_torch":
            s_cfg[("uint8", "auto")]["images_per_s"] / t_u8["images_per_s"],
        "photo_float_saturate_auto_over_torch":
            s_cfg[("float", "auto")]["images_per_s"] / t_f32["images_per_s"],
        "photo_uint8_saturate_over_decode_bound": s_u8["images_per_s"] / d_sum["images_per_s"],
        "photo_float_saturate_over_decode_bound": s_f32["images_per_s"] / d_sum["images_per_s"],
        "photo_uint8_cpu_torch_over_saturate": t_u8["cpu_s_per_image"] / s_u8["cpu_s_per_image"],
        "photo_float_cpu_torch_over_saturate": t_f32["cpu_s_per_image"] / s_f32["cpu_s_per_image"],
        "photo_uint8_cpu_decode_bound_over_saturate":
            d_sum["cpu_s_per_image"] / s_u8["cpu_s_per_image"],
        "photo_float_cpu_decode_bound_over_saturate":
            d_sum["cpu_s_per_image"] / s_f32["cpu_s_per_image"],
        "fmnist_saturate_over_torch": s_fm["images_per_s"] / t_fm["images_per_s"],
        "fmnist_cpu_torch_over_saturate": t_fm["cpu_s_per_image"] / s_fm["cpu_s_per_image"],
    }
    res["ratios"] = ratios

    def row(name, setting, x):
        runs = "/".join(f"{v:.0f}" for v in x["runs"])
        print(f"| {name:<44} | {setting:<24} | {x['images_per_s']:>9.0f} | {runs:<16} | "
              f"{x['cores']:5.2f} | {x['cpu_s_per_image'] * 1e3:10.3f} |")

    la = res["load_average_1min"]
    print()
    print(f"feed_vs_torch: {res['date_utc']}, {cores} cores, load average (1 min) during the run "
          f"{la['min']:.2f}-{la['max']:.2f} (mean {la['mean']:.2f}), {res['wall_s']:.0f} s")
    print(f"| {'pipeline':<44} | {'setting':<24} | {'images/s':>9} | {'runs':<16} | "
          f"{'cores':>5} | {'CPU ms/img':>10} |")
    print(f"|{'-' * 46}|{'-' * 26}|{'-' * 10}:|{'-' * 18}|{'-' * 6}:|{'-' * 11}:|")
    print(f"| **A. photos, {len(paths)} JPEGs, RRC(224)+flip, batch 64** | | | | | |")
    for r in sweep_u8:
        row("torch DataLoader, uint8 (PILToTensor)", f"num_workers={r['num_workers']}",
            summary([r]))
    for r in sweep_f32:
        row("torch DataLoader, float (ToTensor+Normalize)", f"num_workers={r['num_workers']}",
            summary([r]))
    row("**torch uint8, best num_workers**", f"num_workers={w_u8}", t_u8)
    row("**torch float, best num_workers**", f"num_workers={w_f32}", t_f32)
    for (k, t), x in s_cfg.items():
        row(f"**saturate {k}**", f"--threads {t} (ends {x['threads']})", x)
    row("decode only: libjpeg-turbo, full size", "2 threads", d_sum)
    row("decode only: PIL open().convert('RGB')", "Pool(2)", pil_sum)
    print(f"| **B. Fashion-MNIST, 60000, float normalized, batch 256** | | | | | |")
    for r in fm_sweep:
        row("torch DataLoader, tensor Dataset", f"num_workers={r['num_workers']}", summary([r]))
    row("**torch, best num_workers**", f"num_workers={w_fm}", t_fm)
    for t, x in s_fm_cfg.items():
        row("**saturate**", f"--threads {t} (ends {x['threads']})", x)
    print()
    print("ratios (wall: best run vs best run; cpu: CPU time per image, lowest vs lowest):")
    for k, v in ratios.items():
        print(f"  {k:<46} {v:8.2f}")
    print("bars: photo saturate/torch >= 5 (uint8 and float), saturate/decode bound >= 0.80, "
          "Fashion-MNIST saturate/torch >= 30, RSS within the bound")
    if "rss" in res:
        r = res["rss"]
        mib = 1 << 20
        print(f"RSS over 10 epochs: {r['max_rss_bytes'] / mib:.1f} MiB max; bound "
              f"{r['bound_bytes'] / mib:.1f} MiB = buffers {r['buffers_bytes'] / mib:.1f} "
              f"({r['batch_bytes']} B x (prefetch {r['prefetch']} + held {r['max_held_batches']}))"
              f" + mapping {r['mapping_bytes'] / mib:.1f} + decode scratch "
              f"{r['scratch_bytes_est'] / mib:.1f} (est., {r['threads']} threads) + process "
              f"baseline {r['baseline_rss_bytes'] / mib:.1f} -> "
              f"{'within' if r['within_bound'] else 'OVER'} the bound; "
              f"10-epoch rate {r['ten_epoch_images_per_s']:.0f} img/s")
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=2)
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
