"""One rank of test_distributed.py, started by the real torchrun (torch >= 2).

usage: dist_worker.py DATASET OUT_DIR shard
       dist_worker.py DATASET OUT_DIR resume [--stop-after K] [--restore]

Joins the gloo process group, then removes RANK/WORLD_SIZE/LOCAL_RANK from the
environment and builds the Loader with no rank arguments, so the sharding must
come from torch.distributed. Writes OUT_DIR/<mode>-rank<r>.json:
- shard: the labels of each batch of one epoch, padded (default) and with
  drop_uneven=True (a label identifies its sample);
- resume: the labels of each batch of epochs 0 and 1. With --stop-after K the
  rank stops after K batches, saves its loader's state_dict to
  OUT_DIR/state-rank<r>.json (as a checkpoint would), reports, and waits for
  the job to be stopped (the test terminates torchrun). With --restore it
  loads that state first and finishes the run.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import saturate


def write_json(path, obj):
    """Whole or not at all: the test polls for these files."""
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)


def epoch_batches(loader):
    return [b["label"].tolist() for b in loader]


def gathered(value):
    """VALUE of every rank (the group really works)."""
    out = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(out, torch.tensor([value], dtype=torch.int64))
    return [int(t.item()) for t in out]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dataset")
    p.add_argument("out_dir")
    p.add_argument("mode", choices=["shard", "resume"])
    p.add_argument("--stop-after", type=int, default=-1)
    p.add_argument("--restore", action="store_true")
    args = p.parse_args()

    launcher = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                               "TORCHELASTIC_RUN_ID", "GROUP_RANK")}
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(name, None)
    result = {"rank": rank, "world_size": dist.get_world_size(), "torch": torch.__version__,
              "launcher_env": launcher}

    if args.mode == "shard":
        for name, drop in (("pad", False), ("drop", True)):
            loader = saturate.Loader(args.dataset, 8, seed=5, drop_uneven=drop)
            batches = epoch_batches(loader)
            result[name] = {"rank": loader.rank, "world_size": loader.world_size,
                            "len": len(loader), "batches": batches,
                            "batch_counts": gathered(len(batches))}
        write_json(os.path.join(args.out_dir, f"shard-rank{rank}.json"), result)
    else:
        loader = saturate.Loader(args.dataset, 8, seed=5, threads=2, prefetch=3)
        state_file = os.path.join(args.out_dir, f"state-rank{rank}.json")
        first_epoch = 0
        if args.restore:
            with open(state_file) as f:
                state = json.load(f)
            loader.load_state_dict(state)
            first_epoch = state["epoch"]
        batches, stopped = [], False
        for epoch in range(first_epoch, 2):
            loader.set_epoch(epoch)  # the usual loop; a no-op right after a restore
            for batch in loader:
                batches.append(batch["label"].tolist())
                if len(batches) == args.stop_after:
                    write_json(state_file, loader.state_dict())
                    stopped = True
                    break
            if stopped:
                break
        result.update(rank_of_loader=loader.rank, world_of_loader=loader.world_size,
                      batches=batches)
        tag = "stopped" if stopped else ("restored" if args.restore else "full")
        write_json(os.path.join(args.out_dir, f"{tag}-rank{rank}.json"), result)
        if stopped:
            time.sleep(120)  # the test stops the job long before; never hang forever
            raise SystemExit("dist_worker: not stopped within 120 s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    import gloo_exit  # beside this file: torch's Gloo can abort in finalization

    gloo_exit.leave(0)
