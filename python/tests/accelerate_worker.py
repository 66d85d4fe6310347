"""One rank of test_accelerate.py's job under `accelerate launch` (CPU, Gloo).

usage: accelerate_worker.py DATASET OUT_DIR train|resume

train: 2 epochs of data-parallel training fed by saturate.accelerate.loader, passed
  through accelerator.prepare; accelerator.save_state after batch 3 of epoch 1.
resume: new processes, a new loader, accelerator.load_state, the rest of epoch 1.
Writes OUT_DIR/rank<R>-<phase>.json: what Accelerate set up and the labels of each batch.
"""

import json
import os
import sys

import torch
from accelerate import Accelerator

import saturate
import saturate.accelerate

BATCH, SEED, SAVE_AFTER = 8, 11, 3

dataset, out_dir, phase = sys.argv[1], sys.argv[2], sys.argv[3]
accelerator = Accelerator(cpu=True)
loader = saturate.accelerate.loader(accelerator, dataset, BATCH, seed=SEED, threads=1)
# A plain loader made after Accelerator(): its rank comes from torch.distributed.
plain = saturate.Loader(dataset, BATCH, seed=SEED, threads=1)
torch.manual_seed(0)
model = torch.nn.Linear(64, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
state_dir = os.path.join(out_dir, "state")


def train(epoch, batches, save_after=None):
    labels = []
    for i, batch in enumerate(batches):
        labels.append(batch["label"].tolist())
        x = batch["image"].reshape(-1, 64).float() / 255
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), batch["label"].float() / 255)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if i + 1 == save_after:
            accelerator.save_state(state_dir)
    return labels


epochs = {}
if phase == "train":
    for epoch in range(2):
        loader.set_epoch(epoch)
        epochs[epoch] = train(epoch, prepared, SAVE_AFTER if epoch == 1 else None)
else:
    accelerator.load_state(state_dir)
    epoch = loader.epoch  # before the loop ends it (then the loader moves to the next)
    epochs[epoch] = train(epoch, prepared)

weights = accelerator.unwrap_model(model).weight.detach()
report = {
    "distributed_type": str(accelerator.distributed_type),
    "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
    "process_index": accelerator.process_index,
    "num_processes": accelerator.num_processes,
    "prepare_returned_the_loader": prepared is loader,
    "loader": [loader.rank, loader.world_size, len(loader)],
    "plain_loader": [plain.rank, plain.world_size],
    "epochs": epochs,
    "weights_sum": float(weights.double().sum()),
}
path = os.path.join(out_dir, f"rank{accelerator.process_index}-{phase}.json")
with open(path, "w") as f:
    json.dump(report, f)
accelerator.end_training()
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
# A Gloo thread that still needs the GIL when finalization begins aborts the rank ("terminate
# called without an active exception", seen in CI after this file had destroyed the group):
# gloo_exit.leave ends the process without finalization.
import gloo_exit  # noqa: E402 (beside this file)

gloo_exit.leave(0)
