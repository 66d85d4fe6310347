#!/usr/bin/env python3
"""A PyTorch Lightning script as people write them: a wide MLP trained by Adam on random
data, with ModelCheckpoint saving every --save-every steps (Lightning's own torch.save by
default; with --io saturate through saturate's plugin, the one change doctor suggests).
Knows nothing about saturate otherwise.

    python lightning_train.py --steps 40 --save-every 5 --out /tmp/ckpt [--io saturate]
"""

import argparse

import lightning.pytorch as pl
import torch
import torch.nn as nn


class Wide(pl.LightningModule):
    def __init__(self, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(512, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-4)


def main():
    p = argparse.ArgumentParser(description="Lightning MLP, ModelCheckpoint every N steps")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--out", default="checkpoints")
    p.add_argument("--io", choices=["torch", "saturate"], default="torch")
    args = p.parse_args()

    torch.manual_seed(0)
    n = args.batch_size * 8
    data = torch.utils.data.TensorDataset(torch.randn(n, 512), torch.randint(0, 10, (n,)))
    plugins = []
    if args.io == "saturate":
        from saturate.lightning import SaturateCheckpointIO

        plugins = [SaturateCheckpointIO()]
    every = pl.callbacks.ModelCheckpoint(dirpath=args.out, every_n_train_steps=args.save_every,
                                         save_top_k=1)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[every], plugins=plugins)
    trainer.fit(Wide(args.hidden), torch.utils.data.DataLoader(data, batch_size=args.batch_size))


if __name__ == "__main__":
    main()
