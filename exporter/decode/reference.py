"""The eager reference of a language model: teacher-forced logits and the greedy continuation; and the shape of
the model's static KV cache, which every decode step built and stepped holds (``cache_shape``).

Both come from the model's full forward, without any cache (the cache is what the artifacts are
checked on): the greedy continuation re-runs the whole sequence for every new token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Reference:
    """What every kind of a check is compared against: per prompt, its tokens, the approved continuation, eager's
    teacher-forced logits over both and eager's greedy continuation."""

    names: list[str]
    prompts: list[np.ndarray]
    approved: list[np.ndarray]
    logits: list[np.ndarray]
    generated: list[np.ndarray]


def greedy(model: nn.Module, prompt: np.ndarray, new_tokens: int) -> np.ndarray:
    sequence = torch.from_numpy(np.asarray(prompt, np.int64))[None]
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits = model(input_ids=sequence, use_cache=False).logits[0, -1]
            sequence = torch.cat([sequence, logits.argmax().view(1, 1)], dim=1)
    return sequence[0, len(prompt):].numpy()


def forced_logits(model: nn.Module, prompt: np.ndarray, continuation: np.ndarray) -> np.ndarray:
    sequence = torch.from_numpy(np.concatenate([prompt, continuation]).astype(np.int64))[None]
    with torch.inference_mode():
        return model(input_ids=sequence, use_cache=False).logits[0].numpy().astype(np.float32)


def eager_reference(model: nn.Module, prompts: list[np.ndarray], new_tokens: int,
                    approved: list[np.ndarray] | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``(continuations, logits)``: per prompt the greedy ``new_tokens``, and the teacher-forced logits over prompt +
    ``approved`` (a golden set's continuations, which a check forces), or over prompt + those continuations (a recording)."""
    continuations = [greedy(model, p, new_tokens) for p in prompts]
    forced = continuations if approved is None else approved
    return continuations, [forced_logits(model, p, c) for p, c in zip(prompts, forced, strict=True)]


def cache_shape(model: Any, cache_length: int) -> tuple[int, int, int, int]:
    """``(layers, kv_heads, cache_length, head_dim)``: the static cache of ``model``'s decode step (steps.CachedStep)."""
    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return (config.num_hidden_layers, kv_heads, cache_length, config.hidden_size // heads)
