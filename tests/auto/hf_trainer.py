#!/usr/bin/env python3
"""Fine-tune a small BERT classifier with Hugging Face's Trainer, as most
text-model scripts do: synthetic token ids (no downloads), checkpoints every
--save-steps steps (the Trainer writes the weights with safetensors, then
torch.saves the optimizer, scheduler and RNG state). Knows nothing about
saturate.

    python hf_trainer.py --steps 40 --save-steps 10 --out /tmp/hf-out
    python hf_trainer.py --steps 30 --text-chars 20000   # input-bound: tokenizes inline
"""

import argparse
import random
import zlib

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class SyntheticText(torch.utils.data.Dataset):
    """Sequences of token ids; the label is the first token's parity. With text_chars, each
    sample is a random text of that many characters tokenized as it is fetched (a word-hash
    tokenizer in Python: the CPU cost of on-the-fly tokenization), else random ids."""

    def __init__(self, n, seq_len, vocab, text_chars=0):
        self.n, self.seq_len, self.vocab, self.text_chars = n, seq_len, vocab, text_chars

    def __len__(self):
        return self.n

    def tokenize(self, i):
        rng = random.Random(i)
        text = "".join(rng.choice("abcdefghij klmnop") for _ in range(self.text_chars))
        ids = [zlib.crc32(word.encode()) % self.vocab for word in text.split()]
        return torch.tensor((ids + [0] * self.seq_len)[:self.seq_len])

    def __getitem__(self, i):
        if self.text_chars:
            ids = self.tokenize(i)
        else:
            ids = torch.randint(0, self.vocab, (self.seq_len,),
                                generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "labels": torch.tensor(int(ids[0]) % 2)}


def main():
    p = argparse.ArgumentParser(description="BERT fine-tuning with the Trainer")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-steps", type=int, default=0, help="0: no checkpoints")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--text-chars", type=int, default=0,
                   help="tokenize a text of this many characters per sample as it is fetched")
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
                      train_dataset=SyntheticText(100_000, 64, a.vocab, a.text_chars))
    trainer.train()


if __name__ == "__main__":
    main()
