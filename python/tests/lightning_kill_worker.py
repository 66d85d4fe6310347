"""A Lightning fit that checkpoints every step through SaturateCheckpointIO (top-2 by step and
last.ckpt) until it is killed; test_lightning.py kills it with SIGKILL at random points.
Resumes from CKPT_DIR/last.ckpt when there is one. Prints "start S" (the global step it
starts from) and then "step S" after every batch, flushed.

usage: lightning_kill_worker.py CKPT_DIR
"""

import os
import sys

import torch

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

from saturate.lightning import SaturateCheckpointIO

ckpts = sys.argv[1]


class Wide(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.Linear(2048, 256))

    def on_train_start(self):
        print("start", self.trainer.global_step, flush=True)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        print("step", self.trainer.global_step, flush=True)

    def training_step(self, batch, batch_idx):
        return self.net(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-4)  # state: 3 x 4 MiB


torch.manual_seed(0)
every_step = pl.callbacks.ModelCheckpoint(dirpath=ckpts, every_n_train_steps=1, monitor="step",
                                          mode="max", save_top_k=2, save_last=True)
trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=1_000_000, logger=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[every_step], plugins=[SaturateCheckpointIO()])
last = os.path.join(ckpts, "last.ckpt")
trainer.fit(Wide(), torch.utils.data.DataLoader(torch.randn(4096, 256), batch_size=16),
            ckpt_path=last if os.path.exists(last) else None)
