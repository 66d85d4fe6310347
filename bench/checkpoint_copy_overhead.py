"""Per-tensor Python cost of copying a state's tensors into a checkpoint pool buffer (issue 25,
point 4): the two ways to make the destination view (a ctypes buffer + torch.frombuffer per
tensor, as saturate.checkpoint's device staging does, or a slice of one view of the pool) and
the ways to issue the copies (copy_ per tensor, one torch._foreach_copy_, or runs of adjacent
tensors gathered into one buffer and copied once, as saturate.checkpoint does now). Host tensors
of 16 bytes, so the copies' bytes cost nothing and what is left is the per-tensor work. Also
the flattening of a state shaped like model.state_dict() + an SGD optimizer's state_dict()
(a tensor per parameter and per momentum buffer, param_groups listing the parameter ids).

usage: python bench/checkpoint_copy_overhead.py [TENSORS]   (default 481: ResNet-50's state
with SGD momentum); needs torch >= 2.1 for _foreach_copy_ and saturate on PYTHONPATH.
"""
import ctypes
import sys
import tempfile
import time

import torch

import saturate
from saturate import checkpoint as cp


def best_us(fn, n, repeats=20):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e6 / n


def model_and_optimizer_state(n):
    """n tensors as {"model": state_dict, "optimizer": SGD's state_dict} hold them."""
    params = n // 2
    model = {f"layer{i}.weight": torch.ones(4) for i in range(n - params)}
    optimizer = {"state": {i: {"momentum_buffer": torch.ones(4)} for i in range(params)},
                 "param_groups": [{"params": list(range(params)), "lr": 0.1, "momentum": 0.9,
                                   "dampening": 0, "weight_decay": 1e-4, "nesterov": False}]}
    return {"model": model, "optimizer": optimizer, "step": 1000}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 481
    _, f = cp._flatten({f"t{i}": torch.ones(4) for i in range(n)})
    with tempfile.TemporaryDirectory() as d, saturate.Checkpointer(d) as ckpt:
        pending = ckpt._core.begin(1, [(s[0], 0) + tuple(s[2:]) for s in f.specs])
        pool = torch.frombuffer((ctypes.c_uint8 * pending.buffer_bytes).from_address(
            pending.buffer), dtype=torch.uint8)
        pairs = list(enumerate(f.sources))

        def views_per_tensor():
            return [torch.frombuffer((ctypes.c_uint8 * t.nbytes).from_address(
                pending.destination(i)), dtype=torch.uint8) for i, t in pairs]

        def views_sliced():
            base = pending.buffer
            return [pool[pending.destination(i) - base:pending.destination(i) - base + t.nbytes]
                    for i, t in pairs]

        dsts = views_sliced()
        srcs = [t.reshape(-1).view(torch.uint8) for _, t in pairs]

        def copy_each():
            for a, b in zip(dsts, srcs):
                a.copy_(b)

        print(f"torch {torch.__version__}, {n} tensors of 16 bytes; microseconds per tensor")
        state = model_and_optimizer_state(n)
        print(f"  flatten a model + optimizer state:     "
              f"{best_us(lambda: cp._flatten(state), n):.2f}")
        print(f"  destination view, ctypes + frombuffer: {best_us(views_per_tensor, n):.2f}")
        print(f"  destination view, slice of one view:   {best_us(views_sliced, n):.2f}")
        print(f"  copy_ per tensor:                      {best_us(copy_each, n):.2f}")
        print(f"  gathered runs (checkpoint's copies):   "
              f"{best_us(lambda: cp._copy_into_pool(pending, pairs), n):.2f}")
        if hasattr(torch, "_foreach_copy_"):
            print(f"  one _foreach_copy_:                    "
                  f"{best_us(lambda: torch._foreach_copy_(dsts, srcs), n):.2f}")
        del pending, pool, dsts


if __name__ == "__main__":
    main()
