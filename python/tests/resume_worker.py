"""Runs a Loader in its own process for test_resume.py.

usage: resume_worker.py DATASET OUT.json [--stop-after N] [--state STATE.json]
Iterates epochs 0 and 1 (from STATE.json when given) and writes the XXH3 digest
of each batch it produced; with --stop-after it stops after N batches and also
writes the loader's state_dict, as a training job saving a checkpoint would.
"""

import argparse
import json

import numpy as np
import xxhash

import saturate
from saturate import transforms as T


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dataset")
    p.add_argument("out")
    p.add_argument("--stop-after", type=int, default=-1)
    p.add_argument("--state")
    args = p.parse_args()
    loader = saturate.Loader(args.dataset, 5, seed=11, threads=2,
                             transforms={"image": [T.RandomResizedCrop(24), T.RandomHorizontalFlip()]})
    first_epoch = 0
    if args.state:
        with open(args.state) as f:
            state = json.load(f)
        loader.load_state_dict(state)
        first_epoch = state["epoch"]
    digests, result = [], {}
    for epoch in range(first_epoch, 2):
        loader.set_epoch(epoch)  # the usual loop; a no-op right after a restore
        for batch in loader:
            digests.append(xxhash.xxh3_64(b"".join(np.asarray(t).tobytes() for t in batch.values())).hexdigest())
            if len(digests) == args.stop_after:
                result["state"] = loader.state_dict()
                break
        if "state" in result:
            break
    result["digests"] = digests
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
