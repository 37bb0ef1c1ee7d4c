"""Train the two bundled decoders (models/decoders.py) and their tokenizer (issue 45).

The text is the Python reference manual CPython ships (``pydoc_data.topics``: ~465 KB, no
download). A 512-token byte-level BPE tokenizer is trained on it with the ``tokenizers`` library
and written to ``models/checkpoints/decoder_tokenizer.json``; each model is trained for a fixed
number of steps (AdamW, cosine decay, batches of 16 windows of 64 tokens) on the first 95% of the
tokens and its perplexity measured on the last 5%, against the uniform perplexity (512). The
weights are saved as fp16 (``<name>.pth``) and its numbers in ``<name>.json``.

    nice -n 10 python -m models.train_decoders tokenizer
    nice -n 10 python -m models.train_decoders gpt2_tiny &  nice -n 10 python -m models.train_decoders llama_tiny
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from models.decoders import DECODERS, VOCAB_SIZE

HERE = Path(__file__).resolve().parent
CHECKPOINTS = HERE / "checkpoints"
WINDOW, BATCH, STEPS = 64, 16, 600


def corpus_text() -> str:
    import pydoc_data.topics

    return "\n\n".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))


def train_tokenizer(text: str, path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([text], trainer=trainer)
    tokenizer.save(str(path))


def perplexity(model: torch.nn.Module, tokens: torch.Tensor) -> float:
    windows = tokens[: len(tokens) // WINDOW * WINDOW].view(-1, WINDOW)
    losses = []
    with torch.inference_mode():
        for start in range(0, len(windows), BATCH):
            batch = windows[start:start + BATCH]
            losses.append(float(model(batch, labels=batch).loss) * len(batch))
    return math.exp(sum(losses) / len(windows))


def train(name: str, tokens: torch.Tensor, held_out: torch.Tensor) -> dict[str, float]:
    torch.manual_seed(0)
    model = DECODERS[name]()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=STEPS, pct_start=0.05)
    generator = torch.Generator().manual_seed(1)
    started = time.process_time()
    for step in range(STEPS):
        starts = torch.randint(0, len(tokens) - WINDOW - 1, (BATCH,), generator=generator)
        batch = torch.stack([tokens[s:s + WINDOW] for s in starts.tolist()])
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 100 == 0:
            print(f"{name} step {step} loss {loss.item():.3f}", flush=True)
    model.eval()
    cpu = time.process_time() - started
    model.half()
    torch.save(model.state_dict(), CHECKPOINTS / f"{name}.pth")
    model.float()  # the perplexity of the weights as shipped: fp16 values, computed in fp32
    return {"held_out_perplexity": round(perplexity(model, held_out), 2), "uniform_perplexity": float(VOCAB_SIZE),
            "parameters": sum(p.numel() for p in model.parameters()), "train_cpu_seconds": round(cpu, 1)}


def main(what: str) -> None:
    torch.set_num_threads(1)  # the two models train side by side, one core each
    text = corpus_text()
    tokenizer_path = CHECKPOINTS / "decoder_tokenizer.json"
    if what == "tokenizer":
        train_tokenizer(text, tokenizer_path)
        return
    from tokenizers import Tokenizer

    ids = np.asarray(Tokenizer.from_file(str(tokenizer_path)).encode(text).ids, dtype=np.int64)
    split = int(len(ids) * 0.95)
    tokens, held_out = torch.from_numpy(ids[:split]), torch.from_numpy(ids[split:])
    result = {"corpus": "pydoc_data.topics", "tokens": len(ids), **train(what, tokens, held_out)}
    print(what, result, flush=True)
    (CHECKPOINTS / f"{what}.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
