#!/usr/bin/env python3
"""A character-level GPT trained the way many small-LLM repositories train one
(nanoGPT's train.py and its descendants): module-level settings overridden by
--key=value, tokens in a uint16 np.memmap read by a get_batch() function (no
DataLoader), gradient accumulation, a warmup + cosine learning rate, an
estimate of the train/val loss every eval_interval iterations under no_grad,
and a torch.save of model + optimizer + settings when the val loss improves.
Single process or DDP under torchrun (the env vars), CPU or CUDA, fp32/bf16/fp16
(GradScaler). Knows nothing about saturate.

    python gpt_train.py --max_iters=60 --eval_interval=20 --out_dir=/tmp/gpt
    torchrun --nproc-per-node 2 gpt_train.py --max_iters=40
"""

import math
import os
import sys
import time
from ast import literal_eval
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

# ---- settings (each one can be overridden with --name=value) ----
out_dir = "out-gpt"
data_dir = "data-gpt"
eval_interval = 20
eval_iters = 8
log_interval = 1
always_save_checkpoint = False
gradient_accumulation_steps = 2
batch_size = 8
block_size = 64
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0
learning_rate = 1e-3
max_iters = 60
weight_decay = 0.1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
warmup_iters = 10
min_lr = 1e-4
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
seed = 1337
compile = False  # torch.compile the model (torch >= 2)


def apply_overrides(argv):
    """--name=value for any setting above; the value is a Python literal or a string."""
    g = globals()
    for arg in argv:
        if not arg.startswith("--") or "=" not in arg:
            sys.exit(f"gpt_train.py: expected --name=value, got {arg!r}")
        name, value = arg[2:].split("=", 1)
        if name not in g or name.startswith("_") or callable(g[name]):
            sys.exit(f"gpt_train.py: unknown setting {name!r}")
        try:
            parsed = literal_eval(value)
        except (SyntaxError, ValueError):
            parsed = value
        if type(parsed) is not type(g[name]) and not (isinstance(g[name], float) and isinstance(parsed, int)):
            sys.exit(f"gpt_train.py: --{name} wants a {type(g[name]).__name__}, got {value!r}")
        g[name] = type(g[name])(parsed)


# ---- the model ----
class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.drop = nn.Dropout(dropout)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(n_embd, dim=2)
        q, k, v = (z.view(b, t, n_head, c // n_head).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=dropout if self.training else 0.0)
        else:  # torch 1.x
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            att = self.drop(att.masked_fill(~self.mask[:, :, :t, :t], float("-inf")).softmax(-1))
            y = att @ v
        return self.drop(self.proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = SelfAttention()
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)),
                                                           targets.view(-1))
        return logits, loss

    def configure_optimizers(self):
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(beta1, beta2))


# ---- the data: a uint16 token file, made once from the text this file ships with ----
def prepare_data():
    if os.path.exists(os.path.join(data_dir, "val.bin")):
        return
    os.makedirs(data_dir, exist_ok=True)
    text = open(__file__, encoding="utf-8").read() * 40
    ids = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)
    split = int(0.9 * len(ids))
    ids[:split].tofile(os.path.join(data_dir, "train.bin"))
    ids[split:].tofile(os.path.join(data_dir, "val.bin"))


def get_batch(split):
    # A new memmap each call, as the originals do (a long-lived one grows the RSS).
    data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size - 1, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    if device.startswith("cuda"):
        return (x.pin_memory().to(device, non_blocking=True),
                y.pin_memory().to(device, non_blocking=True))
    return x.to(device), y.to(device)


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio))) * (learning_rate - min_lr)


def main():
    global gradient_accumulation_steps, device
    apply_overrides(sys.argv[1:])
    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        from torch.distributed import destroy_process_group, init_process_group
        from torch.nn.parallel import DistributedDataParallel as DDP
        init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
        rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
        world = int(os.environ["WORLD_SIZE"])
        if device.startswith("cuda"):
            device = f"cuda:{local_rank}"
            torch.cuda.set_device(device)
        master = rank == 0
        gradient_accumulation_steps = max(1, gradient_accumulation_steps // world)
        seed_offset = rank
    else:
        master, seed_offset = True, 0
    if master:
        os.makedirs(out_dir, exist_ok=True)
        prepare_data()
    if ddp:
        torch.distributed.barrier()
    torch.manual_seed(seed + seed_offset)
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    ctx = nullcontext() if ptdtype == torch.float32 else torch.autocast(device_type, dtype=ptdtype)

    model = GPT(vocab_size=256).to(device)
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
    optimizer = model.configure_optimizers()
    raw_model = model
    if compile:
        model = torch.compile(model)
    if ddp:
        model = DDP(model, device_ids=[local_rank] if device_type == "cuda" else None)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                x, y = get_batch(split)
                with ctx:
                    _, loss = model(x, y)
                losses[k] = loss.item()  # EVAL_SYNC_LINE
            out[split] = losses.mean()
        model.train()
        return out

    x, y = get_batch("train")
    t0 = time.time()
    iter_num, best_val_loss = 0, 1e9
    while True:
        lr = get_lr(iter_num)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num % eval_interval == 0 and master:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if losses["val"] < best_val_loss or always_save_checkpoint:
                best_val_loss = losses["val"]
                if iter_num > 0:
                    checkpoint = {"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                                  "iter_num": iter_num, "best_val_loss": best_val_loss}
                    torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))  # SAVE_LINE
        for micro_step in range(gradient_accumulation_steps):
            if ddp:  # all-reduce only on the last micro step
                model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
            with ctx:
                _, loss = model(x, y)
                loss = loss / gradient_accumulation_steps
            x, y = get_batch("train")  # the next batch, while the device computes this one
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if iter_num % log_interval == 0 and master:
            lossf = loss.item() * gradient_accumulation_steps  # LOG_SYNC_LINE
            print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.1f}ms")
        iter_num += 1
        if iter_num > max_iters:
            break
    if ddp:
        destroy_process_group()


if __name__ == "__main__":
    main()
