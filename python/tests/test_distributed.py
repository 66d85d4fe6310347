"""A torchrun-style 2-process run on CPU (gloo): disjoint, covering, equal shards."""

import json
import os
import socket
import subprocess
import sys

from conftest import DIGITS, HERE


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(dataset, out_dir, world_size=2):
    """What torchrun does for one node: one process per rank with RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR and MASTER_PORT set. (Debian's torch 1.13 torchrun does
    not start under Python 3.11, so the test sets the same environment itself.)"""
    env = os.environ.copy()
    env.update(PYTHONPATH=os.pathsep.join(sys.path), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE=str(world_size))
    procs = [subprocess.Popen([sys.executable, f"{HERE}/dist_worker.py", dataset, str(out_dir)],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stderr=subprocess.PIPE, text=True)
             for r in range(world_size)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    for p, err in zip(procs, errors):
        assert p.returncode == 0, err[-3000:]


def test_two_ranks_get_disjoint_covering_shards_from_torch_distributed(digits, tmp_path):
    launch(digits, tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 for r in ranks)
    # 101 samples over 2 ranks: 51 each, the shorter rank padded by one repeat
    # (as DistributedSampler does), so both ranks run the same number of steps.
    assert [len(r["labels"]) for r in ranks] == [51, 51]
    assert ranks[0]["counts"] == ranks[1]["counts"] == [51.0, 51.0]
    assert ranks[0]["len"] == ranks[1]["len"] == 7
    a, b = ranks[0]["labels"], ranks[1]["labels"]
    assert set(a) | set(b) == set(range(DIGITS))
    assert len(set(a) & set(b)) == 1  # only the padding sample appears twice
