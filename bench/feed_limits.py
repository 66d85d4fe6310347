"""saturate's feed at the machine's limits, in one run (issue 29):

  A. Small records: Fashion-MNIST (60,000 28x28 uint8), batch 256, float32
     normalized. The torch DataLoader over the usual tensor-backed Dataset at
     every num_workers in every repeat, its best run of them all (the sweep
     included) taken as its rate; `saturate bench feed` at threads 1, 2 and
     auto; and beside them the memory-bandwidth bounds: memcpy bytes/s on the same
     thread count (bench/memcpy_bound, buffers far larger than the caches)
     turned into samples/s as 2 * rate / (bytes read + bytes written per
     sample), once with glibc's streaming stores and once with ordinary
     (cached) stores, which read each destination line before writing it.
     The loader writes CPU batches with cached stores (so that the training
     loop reads them from the caches), so the cached bound is its own.
  B. Autotuning from the first second: the photo set (RandomResizedCrop 224,
     uint8, batch 64) over 2 and over 8 epochs. First a sweep: every fixed
     thread count and auto, REPEATS times, alternating; the fixed count with
     the best median is "the best fixed setting". Then a head-to-head: PAIRS
     (default 16) pairs of that setting and auto, run back to back with the
     order swapped every pair, and auto's rate over the fixed one's in each
     pair. The verdict is the median of those ratios. The sweep's best-of
     ratio is printed too, but it is biased against auto: the best of several
     noisy runs of several settings is drawn from more runs than auto's best
     (a winner's curse), and on a 2-core VM single runs of one configuration
     spread by 10-20%.

Configurations alternate within each repeat so that load on the machine hits
them alike; each configuration's best run is reported, with all runs in the
JSON. Run through bench/feed_limits.sh.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from feed_vs_torch import (FMNIST_BATCH, FMNIST_MEAN, FMNIST_STD, PHOTO_BATCH,  # noqa: E402
                           FashionMnist, LoadSampler, best, ints, log, saturate_feed, time_epoch)

FMNIST_READ_BYTES = 28 * 28 + 8  # uint8 image + int64 label
FMNIST_WRITE_BYTES = 28 * 28 * 4 + 8  # float32 image + int64 label


def median_rate(runs):
    return statistics.median(r["images_per_s"] for r in runs)


def memcpy_rates(program, threads):
    """(streaming-store, cached-store) copy bytes/s on `threads` threads."""
    out = json.loads(subprocess.run([program, "--threads", str(threads)], check=True,
                                    capture_output=True, text=True).stdout)
    return out["copy_bytes_per_s"], out["cached_copy_bytes_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--saturate", required=True)
    ap.add_argument("--memcpy-bound", required=True)
    ap.add_argument("--photos-sat", required=True)
    ap.add_argument("--fmnist-images", required=True)
    ap.add_argument("--fmnist-labels", required=True)
    ap.add_argument("--fmnist-sat", required=True)
    ap.add_argument("--out", required=True, help="JSON results file")
    args = ap.parse_args()

    repeats = int(os.environ.get("REPEATS", "3"))
    pairs = int(os.environ.get("PAIRS", "16"))
    fmnist_workers = ints(os.environ.get("FMNIST_WORKERS", "0 1 2"))
    cores = os.cpu_count()
    fixed = [str(t) for t in range(1, cores + 1)]
    fmnist_t = f"image:to-float,mean={FMNIST_MEAN:.4f},std={FMNIST_STD:.4f}"
    photo_t = "image:crop=random,size=224,flip=0.5"
    res = {"machine": {"cores": cores, "platform": platform.platform()},
           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "repeats": repeats}

    with LoadSampler() as load:
        log("== A. Fashion-MNIST, batch 256, float32 normalized")
        fm = FashionMnist(args.fmnist_images, args.fmnist_labels)
        sweep = [time_epoch(fm, FMNIST_BATCH, w) for w in fmnist_workers]
        torch_runs = []
        sat = {t: [] for t in fixed + ["auto"]}
        copy = {t: [] for t in fixed}
        cached_copy = {t: [] for t in fixed}
        for i in range(repeats):
            # Every worker count each time: the DataLoader's rate moves by 2x from
            # run to run here, and its best must not hang on one sweep.
            torch_runs += [time_epoch(fm, FMNIST_BATCH, w, seed=i) for w in fmnist_workers]
            for t in sat:
                sat[t].append(saturate_feed(args.saturate, args.fmnist_sat, FMNIST_BATCH, 5,
                                            fmnist_t, t))
            for t in fixed:
                streaming, cached = memcpy_rates(args.memcpy_bound, int(t))
                copy[t].append(streaming)
                cached_copy[t].append(cached)
        torch_best = best(sweep + torch_runs)
        w_best = torch_best["num_workers"]
        res["fmnist"] = {"torch_sweep": sweep, "torch_best_workers": w_best,
                         "torch_runs": torch_runs, "saturate_runs": sat,
                         "memcpy_bytes_per_s": copy, "cached_memcpy_bytes_per_s": cached_copy,
                         "transform": fmnist_t,
                         "read_bytes_per_sample": FMNIST_READ_BYTES,
                         "write_bytes_per_sample": FMNIST_WRITE_BYTES}

        log("== B. photos, RandomResizedCrop 224 uint8, batch 64: fixed threads vs auto")
        photos, head_to_head = {}, {}
        for epochs in (2, 8):
            def feed(t):
                return saturate_feed(args.saturate, args.photos_sat, PHOTO_BATCH, epochs,
                                     photo_t, t)
            runs = {t: [] for t in fixed + ["auto"]}
            for _ in range(repeats):
                for t in runs:
                    runs[t].append(feed(t))
            photos[str(epochs)] = runs
            best_t = max(fixed, key=lambda t: median_rate(runs[t]))
            log(f"   head-to-head over {epochs} epochs: threads {best_t} vs auto, {pairs} pairs")
            pair_runs = []
            for i in range(pairs):
                order = [best_t, "auto"] if i % 2 == 0 else ["auto", best_t]
                pair = {t: feed(t) for t in order}
                pair_runs.append({"fixed": pair[best_t], "auto": pair["auto"]})
            head_to_head[str(epochs)] = {"fixed_threads": best_t, "pairs": pair_runs}
        res["photos"] = photos
        res["photos_head_to_head"] = head_to_head
    res["load_average_1min"] = load.summary()

    # ------------------------------------------------------------- report
    def rate(runs):
        return max(r["images_per_s"] for r in runs)

    t_best = torch_best["images_per_s"]
    per_sample = FMNIST_READ_BYTES + FMNIST_WRITE_BYTES
    print(f"\nA. Fashion-MNIST ({cores} cores; DataLoader best num_workers={w_best}: "
          f"{t_best:,.0f} samples/s)")
    print("| saturate threads | samples/s | x DataLoader | memcpy bound, streaming stores | "
          "of it | memcpy bound, cached stores | of it |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    summary = {"torch_best_per_s": t_best}
    for t, runs in sat.items():
        r = rate(runs)
        used = str(min(best(runs)["threads"], cores))  # auto: where it settled
        bound = 2 * max(copy[used]) / per_sample
        cached = 2 * max(cached_copy[used]) / per_sample
        summary[f"threads_{t}"] = {"per_s": r, "over_torch": r / t_best, "bound_per_s": bound,
                                   "of_bound": r / bound, "cached_bound_per_s": cached,
                                   "of_cached_bound": r / cached, "threads_used": int(used)}
        print(f"| {t} ({used}) | {r:,.0f} | {r / t_best:.1f}x | {bound:,.0f} | {r / bound:.0%} | "
              f"{cached:,.0f} | {r / cached:.0%} |")
    top = 2 * max(cached_copy[str(cores)]) / per_sample
    print(f"100x the DataLoader would be {100 * t_best:,.0f} samples/s: "
          f"{100 * t_best / top:.0%} of the cached-store bound on {cores} threads")
    print("\nB. photos: auto over the best fixed thread count")
    print("| epochs | " + " | ".join(f"threads {t} (best / median)" for t in fixed) +
          " | auto (best / median) | sweep: best auto / best fixed | head-to-head pairs: "
          "auto / fixed, median (quartiles) | auto settled at |")
    print("|---|" + "---:|" * (len(fixed) + 3) + "---|")
    for epochs, runs in photos.items():
        rates = {t: rate(v) for t, v in runs.items()}
        best_fixed = max(rates[t] for t in fixed)
        h2h = head_to_head[epochs]
        ratios = [p["auto"]["images_per_s"] / p["fixed"]["images_per_s"] for p in h2h["pairs"]]
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        settled = sorted({(r["threads"], r["prefetch"])
                          for r in runs["auto"] + [p["auto"] for p in h2h["pairs"]]})
        summary[f"photos_{epochs}_epochs_auto_over_best_fixed"] = statistics.median(ratios)
        summary[f"photos_{epochs}_epochs_sweep_best_auto_over_best_fixed"] = (
            rates["auto"] / best_fixed)
        print(f"| {epochs} | " +
              " | ".join(f"{rates[t]:,.0f} / {median_rate(runs[t]):,.0f}" for t in fixed) +
              f" | {rates['auto']:,.0f} / {median_rate(runs['auto']):,.0f}"
              f" | {rates['auto'] / best_fixed:.3f}"
              f" | **{statistics.median(ratios):.3f}** vs threads {h2h['fixed_threads']} "
              f"({quartiles[0]:.3f}-{quartiles[2]:.3f}, {len(ratios)} pairs)"
              f" | {', '.join(f'threads {t} prefetch {p}' for t, p in settled)} |")
    load_s = res["load_average_1min"]
    print(f"\nload average (1 min) during the run: min {load_s['min']:.2f}, "
          f"mean {load_s['mean']:.2f}, max {load_s['max']:.2f}")
    res["summary"] = summary
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"all runs: {args.out}")


if __name__ == "__main__":
    main()
