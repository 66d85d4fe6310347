"""One rank of a sharded-checkpoint job, for test_checkpoint_dist.py (torch >= 2, torchrun, gloo).

usage:
  checkpoint_dist_worker.py save DIR OUT --steps S [--trace RUN]   save steps 1..S, each committed
  checkpoint_dist_worker.py load DIR OUT                            load into this world, compare
  checkpoint_dist_worker.py loop DIR OUT --mib M                    save steps 1, 2, ... until killed
  checkpoint_dist_worker.py dcp DIR OUT                             (one process) DCP round trips

The state mixes every kind the checkpointer handles: a DTensor sharded on
dim 0 (uneven: 10 rows over 3 ranks), a replicated DTensor, a ShardedTensor
(FSDP1's kind), Shard pieces cut along dim 1, plain replicated tensors
(float32, bfloat16, an nn.Parameter),
a numpy array and per-rank Python values. Every tensor's global value is a
pure function of (name, step): expected(step).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

SHAPES = {"model/dt": (10, 6), "model/dt_rep": (4,), "model/emb": (7, 5), "bias": (5,),
          "half": (3, 4), "param": (2, 2), "np": (6,), "model/st": (7, 3)}


def expected(step, scale=1):
    """name -> the global tensor checkpoint `step` holds (numpy for "np")."""
    out = {}
    for i, (name, shape) in enumerate(SHAPES.items()):
        shape = (shape[0] * scale,) + tuple(shape[1:]) if name == "model/dt" else shape
        n = int(np.prod(shape))
        base = torch.arange(n, dtype=torch.float64).reshape(shape) + 1000 * step + 100 * i
        if name == "model/emb":
            out[name] = base.to(torch.int64)
        elif name == "half":
            out[name] = (base / 64).to(torch.bfloat16)
        elif name == "np":
            out[name] = base.numpy().astype(np.float32)
        else:
            out[name] = base.to(torch.float32)
    return out


def chunk(n, k, c):
    """torch.chunk's piece c of n over k: (start, length)."""
    size = -(-n // k)
    start = min(c * size, n)
    return start, min(start + size, n) - start


def build_state(step, rank, world, mesh, scale=1):
    """This rank's state at `step` (zeros when step is None: a load target)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from saturate.dist_checkpoint import Shard as Piece

    exp = expected(0 if step is None else step, scale)
    if step is None:
        exp = {k: (np.zeros_like(v) if isinstance(v, np.ndarray) else torch.zeros_like(v))
               for k, v in exp.items()}
    emb = exp["model/emb"]
    start, length = chunk(emb.shape[1], world, rank)
    st = exp["model/st"]
    st_start, st_len = chunk(st.shape[0], world, rank)
    return {
        "model": {
            "dt": distribute_tensor(exp["model/dt"], mesh, [Shard(0)]),
            "dt_rep": distribute_tensor(exp["model/dt_rep"], mesh, [Replicate()]),
            "emb": Piece(emb[:, start:start + length].clone(), [0, start], list(emb.shape)),
            "st": sharded_tensor(st[st_start:st_start + st_len].clone(), [st_start, 0], rank,
                                 list(st.shape)),
        },
        "bias": exp["bias"],
        "half": exp["half"],
        "param": torch.nn.Parameter(exp["param"], requires_grad=True),
        "np": exp["np"],
        "step": step,
        "note": f"rank{rank}",
    }


def sharded_tensor(local, offsets, rank, global_shape):
    """A ShardedTensor (FSDP1's SHARDED_STATE_DICT kind) from this rank's one shard."""
    import warnings

    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor import Shard as STShard
    from torch.distributed._shard.sharded_tensor import init_from_local_shards

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of DTensor, still what FSDP1 gives
        md = ShardMetadata(offsets, list(local.shape), f"rank:{rank}/cpu")
        return init_from_local_shards([STShard(local, md)], global_shape)


def check_state(state, step, rank, world, scale=1):
    """Each local piece equals the expected global tensor's slice; returns names checked."""
    exp = expected(step, scale)
    got = {
        "model/dt": (state["model"]["dt"].to_local(),
                     exp["model/dt"][slice(*_span(exp["model/dt"].shape[0], world, rank))]),
        "model/dt_rep": (state["model"]["dt_rep"].to_local(), exp["model/dt_rep"]),
        "bias": (state["bias"], exp["bias"]),
        "half": (state["half"], exp["half"]),
        "param": (state["param"], exp["param"]),
        "np": (torch.from_numpy(state["np"]), torch.from_numpy(exp["np"])),
    }
    s, n = chunk(exp["model/emb"].shape[1], world, rank)
    got["model/emb"] = (state["model"]["emb"].tensor, exp["model/emb"][:, s:s + n])
    s, n = chunk(exp["model/st"].shape[0], world, rank)
    got["model/st"] = (state["model"]["st"].local_shards()[0].tensor, exp["model/st"][s:s + n])
    for name, (a, b) in got.items():
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
        assert torch.equal(a, b), name
    assert isinstance(state["param"], torch.nn.Parameter)
    return sorted(got)


class SlowSnapshots:
    """The engine with every save() slower by `delay_s`, inside the save's span:
    a rank whose snapshots are slow (a planted straggler for doctor)."""

    def __init__(self, core, delay_s):
        self.core, self.delay_s = core, delay_s

    def save(self, *args):
        time.sleep(self.delay_s)
        return self.core.save(*args)

    def __getattr__(self, name):
        return getattr(self.core, name)


def upload_options(a):
    part = a.part_mib << 20
    return {"multipart_threshold_bytes": part, "part_bytes": part} if part else {}


def _span(n, world, rank):
    s, length = chunk(n, world, rank)
    return s, s + length


def write(out, name, obj):
    tmp = os.path.join(out, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, os.path.join(out, name))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["save", "load", "loop", "dcp"])
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--scale", type=int, default=1)
    p.add_argument("--trace", default=None)
    p.add_argument("--slow-rank", type=int, default=-1,
                   help="save: this rank's snapshots take --slow-ms longer (doctor names it)")
    p.add_argument("--slow-ms", type=int, default=0)
    p.add_argument("--part-mib", type=int, default=0,
                   help="s3:// DIR: multipart uploads in parts of this many MiB (>= 5)")
    a = p.parse_args()
    import saturate
    from saturate import dist_checkpoint as dc

    if a.mode == "dcp":
        return dcp_round_trips(a, dc)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    if a.trace:
        saturate.trace.start(os.path.join(a.trace, f"rank-{rank}"))
    if a.mode == "save":
        with dc.DistCheckpointer(a.dir, keep=2, **upload_options(a)) as ckpt:
            if rank == a.slow_rank:
                ckpt._core = SlowSnapshots(ckpt._core, a.slow_ms / 1000)
            for step in range(1, a.steps + 1):
                ckpt.save(build_state(step, rank, world, mesh, a.scale), step)
                ckpt.wait()
                saturate.step()  # doctor's per-rank step table (checkpoint time per step)
        if a.trace:
            saturate.trace.stop()
        # The same tensors saved sharded by torch's own DCP, for from_dcp (mode dcp).
        import torch.distributed.checkpoint as dcp

        last = build_state(a.steps, rank, world, mesh, a.scale)
        dcp.save({"model": {"dt": last["model"]["dt"], "st": last["model"]["st"]},
                  "bias": last["bias"]}, checkpoint_id=os.path.join(a.out, "dcp-sharded"))
        write(a.out, f"save-rank{rank}.json", {"rank": rank, "world": world})
    elif a.mode == "load":
        target = build_state(None, rank, world, mesh, a.scale)
        state, info = dc.load(a.dir, target, info=True)
        names = check_state(state, info["step"], rank, world, a.scale)
        assert state["step"] == info["step"] and state["note"].startswith("rank"), state
        # Sharded interop at scale: the loaded (resharded) state straight into torch's DCP.
        import torch.distributed.checkpoint as dcp

        dcp.save({"model": {"dt": state["model"]["dt"], "st": state["model"]["st"]}},
                 checkpoint_id=os.path.join(a.out, "dcp-from-load"))
        write(a.out, f"load-rank{rank}.json", {"rank": rank, "world": world, "step": info["step"],
                                               "saved_world": info["world_size"], "checked": names,
                                               "note": state["note"]})
    else:  # loop: save until killed; tell the parent our pid and each committed step
        write(a.out, f"pid-rank{rank}.json", {"pid": os.getpid()})
        ckpt = dc.DistCheckpointer(a.dir, keep=2, **upload_options(a))
        step = 0
        while True:
            step += 1
            ckpt.save(build_state(step, rank, world, mesh, a.scale), step)
            if step == 1:
                ckpt.wait()
                write(a.out, f"first-rank{rank}.json", {"step": 1})
            time.sleep(0.005)
    dist.barrier()
    dist.destroy_process_group()
    import gloo_exit  # beside this file: torch's Gloo can abort in finalization

    gloo_exit.leave(0)


def dcp_round_trips(a, dc):
    """saturate (saved by `save` at N ranks) -> DCP -> torch's dcp.load; dcp.save
    (one process, and the N-rank sharded one `save` wrote) -> saturate -> saturate's
    load; every tensor compared."""
    import torch.distributed.checkpoint as dcp

    step = dc.to_dcp(a.dir, os.path.join(a.out, "as-dcp"))
    exp = expected(step)
    target = {"model": {"dt": torch.zeros(10, 6), "dt_rep": torch.zeros(4),
                        "emb": torch.zeros(7, 5, dtype=torch.int64), "st": torch.zeros(7, 3)},
              "bias": torch.zeros(5), "half": torch.zeros(3, 4, dtype=torch.bfloat16),
              "param": torch.zeros(2, 2), "np": torch.zeros(6), "step": -1, "note": ""}
    dcp.load(target, storage_reader=dcp.FileSystemReader(os.path.join(a.out, "as-dcp")),
             no_dist=True)
    for name, want in exp.items():
        got = target
        for part in name.split("/"):
            got = got[part]
        want = torch.from_numpy(want) if isinstance(want, np.ndarray) else want
        assert torch.equal(got, want), name
    assert target["step"] == step and target["note"] == "rank0", target

    src = {"w": torch.randn(33, 7), "nested": {"i": torch.arange(10), "b": torch.ones(3).bfloat16()},
           "epoch": 4}
    dcp.save(src, storage_writer=dcp.FileSystemWriter(os.path.join(a.out, "dcp-native")),
             no_dist=True)
    n = dc.from_dcp(os.path.join(a.out, "dcp-native"), os.path.join(a.out, "from-dcp"), 7)
    back, info = dc.load(os.path.join(a.out, "from-dcp"), info=True)
    assert info["step"] == 7 and n == 3, (info, n)
    assert torch.equal(back["w"], src["w"]) and torch.equal(back["nested"]["i"], src["nested"]["i"])
    assert torch.equal(back["nested"]["b"], src["nested"]["b"]) and back["epoch"] == 4

    # What `load` at 3 ranks passed to dcp.save, read by torch's dcp.load in one process.
    if os.path.exists(os.path.join(a.out, "dcp-from-load")):
        t3 = {"model": {"dt": torch.zeros(10, 6), "st": torch.zeros(7, 3)}}
        dcp.load(t3, storage_reader=dcp.FileSystemReader(os.path.join(a.out, "dcp-from-load")),
                 no_dist=True)
        assert torch.equal(t3["model"]["dt"], exp["model/dt"])
        assert torch.equal(t3["model"]["st"], exp["model/st"])

    # A DCP checkpoint written sharded by 2 ranks (mode save) -> saturate, whole.
    n2 = dc.from_dcp(os.path.join(a.out, "dcp-sharded"), os.path.join(a.out, "from-dcp2"), 3)
    back = dc.load(os.path.join(a.out, "from-dcp2"))
    assert torch.equal(back["model"]["dt"], exp["model/dt"])
    assert torch.equal(back["model"]["st"], exp["model/st"])
    assert torch.equal(back["bias"], exp["bias"]) and n2 == 3
    write(a.out, "dcp.json", {"to_dcp_step": step, "from_dcp_tensors": n, "from_sharded_dcp": n2})
    return 0


if __name__ == "__main__":
    sys.exit(main())
