#!/usr/bin/env python3
"""A Gloo job that ends right after an all-reduce, run under a TorchFunctionMode so that
the collective's saved thread-local state holds a Python object: the shape of torch's
abort at exit (docs/checkpoint.md, "An abort at exit that is torch's").

    for i in $(seq 30); do torchrun --nproc_per_node=2 allreduce_then_exit.py || echo ABORT; done

With torch 2.15 on the 2-core development VM, 14 runs in 50 aborted ("terminate called
without an active exception", exit code -6), and none of 70 under `saturate doctor` (whose
exit handler lets the Gloo threads finish first, docs/auto.md). Knows nothing about saturate.
"""

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode


class Passthrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


dist.init_process_group("gloo")
t = torch.ones(1 << 16)
with Passthrough():
    work = dist.all_reduce(t, async_op=True)
work.wait()
del work  # the Gloo thread now holds the last reference
