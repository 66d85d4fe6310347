"""Lightning checkpoint I/O side by side: what a ModelCheckpoint costs a training loop with
Lightning's own plugins and with saturate's (CPU; PyTorch Lightning from PyPI).

usage: PYTHONPATH=build/<py>/python .venv-torch2/bin/python bench/lightning_checkpoint_bench.py
         [--mib 256] [--steps 60] [--every 10] [--rounds 3] [--dir DIR] [--json OUT]

A model of Linear(1024, 1024) layers holding --mib MiB of float32 weights, trained by Adam
(so a checkpoint holds 3x that: weights and both moments) on random batches, with
ModelCheckpoint(every_n_train_steps=--every, save_top_k=1) into --dir. Variants, alternated
in a rotating order for --rounds rounds, each in a fresh Trainer in this process:

  none        no checkpoints: the loop's own time
  torch       Lightning's default TorchCheckpointIO (torch.save on the training thread)
  async       Lightning's AsyncCheckpointIO (clones the tensors, torch.save in a thread)
  saturate    saturate.lightning.SaturateCheckpointIO (snapshot into a reused host pool,
              C++ writer thread, fsync and atomic commit)

Per variant (medians over rounds): the loop's time (first batch start to last batch end;
the final write, which teardown waits for, is timed apart as `teardown_s`), the time
save_checkpoint held the training thread (mean per save) and the loop's overhead over
`none`. Results: docs/benchmarks.md.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time

import torch

try:
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.io import AsyncCheckpointIO
except ImportError:
    sys.exit("lightning_checkpoint_bench.py: needs PyTorch Lightning (scripts/torch2-env.sh "
             "installs it into .venv-torch2)")

from saturate.lightning import SaturateCheckpointIO

VARIANTS = ("none", "torch", "async", "saturate")


class Wide(pl.LightningModule):
    def __init__(self, layers: int):
        super().__init__()
        self.net = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(layers)])

    def training_step(self, batch, batch_idx):
        return self.net(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-4)


class LoopClock(pl.Callback):
    """The loop's span: first batch start to last batch end."""

    def __init__(self):
        self.start = self.end = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self.start is None:
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.end = time.perf_counter()


def timed_io(io):
    """Wraps io.save_checkpoint to sum the time it holds the training thread."""
    held = []
    save = io.save_checkpoint

    def timed(*args, **kwargs):
        t = time.perf_counter()
        save(*args, **kwargs)
        held.append(time.perf_counter() - t)

    io.save_checkpoint = timed
    return held


def run(variant: str, args, layers: int) -> dict:
    ckpts = os.path.join(args.dir, variant)
    shutil.rmtree(ckpts, ignore_errors=True)
    torch.manual_seed(0)
    batches = torch.utils.data.DataLoader(torch.randn(args.steps * 32, 1024), batch_size=32)
    clock = LoopClock()
    callbacks = [clock]
    plugins = []
    held = []
    if variant != "none":
        io = {"torch": pl.plugins.TorchCheckpointIO, "async": AsyncCheckpointIO,
              "saturate": SaturateCheckpointIO}[variant]()
        held = timed_io(io)
        plugins = [io]
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=ckpts, every_n_train_steps=args.every,
                                                      save_top_k=1))
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=variant != "none", callbacks=callbacks,
                         plugins=plugins, default_root_dir=args.dir)
    t0 = time.perf_counter()
    trainer.fit(Wide(layers), batches)
    fit_s = time.perf_counter() - t0
    loop_s = clock.end - clock.start
    return {"loop_s": loop_s, "teardown_s": max(0.0, fit_s - loop_s), "saves": len(held),
            "held_s_per_save": statistics.mean(held) if held else 0.0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mib", type=int, default=256, help="MiB of float32 weights (state: 3x)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--every", type=int, default=10, help="ModelCheckpoint every_n_train_steps")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default="/tmp/saturate-lightning-ckpt-bench")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    layers = max(1, args.mib // 4)  # a Linear(1024, 1024) holds 4 MiB of float32
    os.makedirs(args.dir, exist_ok=True)
    rows = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
        for v in order:
            rows[v].append(run(v, args, layers))
            print(f"round {r + 1}/{args.rounds} {v:9s} " +
                  " ".join(f"{k}={x:.3f}" if isinstance(x, float) else f"{k}={x}"
                           for k, x in rows[v][-1].items()), file=sys.stderr, flush=True)
    med = {v: {k: statistics.median(x[k] for x in rows[v]) for k in rows[v][0]} for v in VARIANTS}
    base = med["none"]["loop_s"]
    print(f"state {3 * layers * 4} MiB (weights + Adam moments), {args.steps} steps, "
          f"a save every {args.every}, medians of {args.rounds} rounds")
    print(f"{'variant':9s} {'loop s':>8s} {'overhead':>9s} {'held/save s':>12s} "
          f"{'teardown s':>11s}")
    for v in VARIANTS:
        m = med[v]
        print(f"{v:9s} {m['loop_s']:8.2f} {100 * (m['loop_s'] / base - 1):8.1f}% "
              f"{m['held_s_per_save']:12.3f} {m['teardown_s']:11.2f}")
    sat = med["saturate"]
    for other in ("torch", "async"):
        m = med[other]
        print(f"loop overhead saturate / {other}: "
              f"{(sat['loop_s'] - base) / max(1e-9, m['loop_s'] - base):.2f}; "
              f"held per save {other} / saturate: "
              f"{m['held_s_per_save'] / max(1e-9, sat['held_s_per_save']):.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rounds": rows, "median": med}, f, indent=1)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
