"""One rank of test_lightning.py's DDP job (torchrun, 2 CPU ranks, Gloo): fits a linear model
fed by SaturateDataModule for 2 epochs and writes OUT_DIR/rank<R>.json: the labels of every
batch it trained on, and the rank and world size its loader took. Lightning checkpoints each
epoch into OUT_DIR/ckpt through SaturateCheckpointIO (rank 0 saves).

usage: lightning_worker.py DATASET OUT_DIR
"""

import json
import os
import sys

import torch

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

from saturate.lightning import SaturateCallback, SaturateCheckpointIO, SaturateDataModule

dataset, out_dir = sys.argv[1], sys.argv[2]


class Recorder(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(64, 1)
        self.labels = []
        self.loader = None

    def on_train_start(self):
        loader = self.trainer.datamodule.loader("train")  # the one Lightning iterates
        self.loader = [loader.rank, loader.world_size, len(loader)]

    def training_step(self, batch, batch_idx):
        self.labels.append(batch["label"].tolist())
        x = batch["image"].reshape(-1, 64).float() / 255
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), batch["label"].float() / 255)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


data = SaturateDataModule(dataset, batch_size=8, threads=1, seed=3)
model = Recorder()
callback = SaturateCallback(os.path.join(out_dir, "run"))
each_epoch = pl.callbacks.ModelCheckpoint(dirpath=os.path.join(out_dir, "ckpt"), save_last=True)
trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, logger=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     default_root_dir=out_dir, callbacks=[callback, each_epoch],
                     plugins=[SaturateCheckpointIO()])
trainer.fit(model, datamodule=data)
with open(os.path.join(out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
    json.dump({"global_rank": trainer.global_rank, "world_size": trainer.world_size,
               "loader": model.loader,
               "labels": model.labels, "steps": callback.steps,
               "weight_sum": float(model.layer.weight.detach().double().sum())}, f)
# A Gloo thread that still needs the GIL when finalization begins aborts the rank
# (gloo_exit.py): leave without finalization.
import gloo_exit  # noqa: E402 (beside this file)

gloo_exit.leave(0)
