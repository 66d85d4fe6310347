"""One rank of test_distributed.py, started by torch.distributed.run (torchrun).

Joins the gloo process group, then builds the Loader with no rank arguments
and RANK/WORLD_SIZE removed from the environment, so the sharding must come
from torch.distributed. Writes this rank's labels of one epoch to OUT_DIR.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import saturate


def main():
    dataset, out_dir = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(name, None)
    loader = saturate.Loader(dataset, 8, seed=5)
    labels = torch.cat([b["label"] for b in loader]).tolist()
    counts = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([float(len(labels))]))  # the group really works
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump({"rank": loader.rank, "world_size": loader.world_size, "len": len(loader),
                   "labels": labels, "counts": [c.item() for c in counts]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
