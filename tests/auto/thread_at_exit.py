#!/usr/bin/env python3
"""A one-rank Gloo job whose process group is still up when it ends, and a thread that
needs the GIL a moment after the main thread leaves, as a Gloo worker thread does when it
drops the last reference to a collective that just finished.

    python thread_at_exit.py OUT     # the thread writes OUT, if it gets to run

The main thread wakes the (daemon) thread and ends the script at once; the thread needs
the GIL again 20 ms later. If the interpreter has begun to finalize by then, Python ends
the thread when it takes the GIL (the moment torch's threads abort in, docs/auto.md), and
OUT is never written. Knows nothing about saturate.
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

store = sys.argv[1] + ".store"
dist.init_process_group("gloo", init_method="file://" + os.path.abspath(store), rank=0,
                        world_size=1)
dist.all_reduce(torch.ones(4))
go = threading.Event()


def late():
    go.wait()
    time.sleep(0.02)
    with open(sys.argv[1], "w") as f:
        f.write("ran\n")


threading.Thread(target=late, daemon=True).start()
go.set()
