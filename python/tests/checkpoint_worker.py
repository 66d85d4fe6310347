"""A training loop that checkpoints every step, for test_checkpoint.py's kill -9 test.

usage: checkpoint_worker.py DIR DATASET --total N [--no-save] [--mib M]

Resumes from the newest checkpoint in DIR (model arrays, numpy and Python RNG
states, the loader's state_dict), then runs to step N, saving every step with
on_busy="wait". Each step folds the batch and two RNG draws into a running
digest `chain`, so a resumed run ends with the same chain as an uninterrupted
one only if data order and RNG streams resume exactly. Prints "ready",
"saved S committed C" per step and "done CHAIN" (line-buffered) so the parent
knows what had been committed before it killed us. --no-save runs the same
loop without a checkpointer (the reference).
"""

import argparse
import random
import sys

import numpy as np
import xxhash

import saturate


def expected_arrays(step, mib):
    """The arrays checkpoint `step` must hold: a pure function of the step."""
    n = mib * (1 << 20) // 4
    return {
        "a": np.arange(n, dtype=np.float32) + np.float32(step),
        "b": np.random.default_rng(step).integers(0, 1 << 30, 1000, dtype=np.int64),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("dataset")
    p.add_argument("--total", type=int, required=True)
    p.add_argument("--no-save", action="store_true")
    p.add_argument("--mib", type=int, default=8)
    args = p.parse_args()

    loader = saturate.Loader(args.dataset, 5, seed=11, threads=2)
    state = None if args.no_save else saturate.Checkpointer.load(args.dir)
    if state is None:
        step, chain = 0, ""
        np.random.seed(0)
        random.seed(0)
    else:
        step, chain = state["step"], state["chain"]
        loader.load_state_dict(state["loader"])
        np.random.set_state(state["np_rng"])
        random.setstate(state["py_rng"])
    ckpt = None if args.no_save else saturate.Checkpointer(args.dir, keep=2)
    print("ready", flush=True)
    epoch = loader.state_dict()["epoch"]
    while step < args.total:
        loader.set_epoch(epoch)  # a no-op right after a restore
        for batch in loader:
            step += 1
            labels = np.asarray(batch["label"]).tobytes()
            draws = f"{np.random.random():.17g},{random.random():.17g}"
            chain = xxhash.xxh3_64_hexdigest(chain.encode() + labels + draws.encode())
            if ckpt is not None:
                ckpt.save({"step": step, "chain": chain, "loader": loader.state_dict(),
                           "np_rng": np.random.get_state(), "py_rng": random.getstate(),
                           "arrays": expected_arrays(step, args.mib)}, step)
                print(f"saved {step} committed {ckpt.stats()['last_committed_step']}", flush=True)
            if step == args.total:
                break
        epoch += 1
    if ckpt is not None:
        ckpt.close()
    print(f"done {chain}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
