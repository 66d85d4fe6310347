#!/usr/bin/env python3
"""Fine-tune a small BERT classifier with Hugging Face's Trainer, as most
text-model scripts do: synthetic token ids (no downloads), checkpoints every
--save-steps steps (the Trainer writes the weights with safetensors, then
torch.saves the optimizer, scheduler and RNG state). Knows nothing about
saturate.

    python hf_trainer.py --steps 40 --save-steps 10 --out /tmp/hf-out
"""

import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class SyntheticText(torch.utils.data.Dataset):
    """Sequences of random token ids; the label is the first token's parity."""

    def __init__(self, n, seq_len, vocab):
        self.n, self.seq_len, self.vocab = n, seq_len, vocab

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.vocab, (self.seq_len,), generator=g)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "labels": torch.tensor(int(ids[0]) % 2)}


def main():
    p = argparse.ArgumentParser(description="BERT fine-tuning with the Trainer")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-steps", type=int, default=0, help="0: no checkpoints")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--out", default="hf-out")
    a = p.parse_args()
    config = BertConfig(vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                        num_attention_heads=4, intermediate_size=4 * a.hidden, num_labels=2)
    args = TrainingArguments(output_dir=a.out, per_device_train_batch_size=a.batch_size,
                             max_steps=a.steps, logging_steps=10, report_to=[],
                             save_strategy="steps" if a.save_steps else "no",
                             save_steps=a.save_steps or 500,
                             dataloader_num_workers=a.workers, use_cpu=True)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                      train_dataset=SyntheticText(100_000, 64, a.vocab))
    trainer.train()


if __name__ == "__main__":
    main()
