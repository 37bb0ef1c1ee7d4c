"""The decode step as deployed: one token in, its logits and the updated static KV cache out.

:class:`CachedStep` wraps a ``transformers`` GPT-2 or Llama model (its own submodules and weights, so
the numbers are the model's) in the function an app calls per token::

    logits, present_key, present_value = step(input_ids, position, past_key, past_value)

``input_ids`` and ``position`` are int64 of shape ``(1,)``; the caches are float32
``(layers, kv_heads, cache_length, head_dim)``, static: the step writes the new key and value at
``position`` (a one-hot select, so every exporter takes it) and attends to slots ``<= position``.
The prompt is prefilled through the same step, a token at a time. The keyword knobs plant the
decode-path bugs the tests need (``write_offset``: the cache written off by one; ``rope_offset=False``:
RoPE applied at position 0 in every step); they never change the full forward (:class:`FullForward`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .reference import cache_shape

INPUTS = ("input_ids", "position", "past_key", "past_value")
OUTPUTS = ("logits", "present_key", "present_value")


def family_of(model: Any) -> str:
    """``gpt2`` or ``llama``: the two layouts the step knows (a ``UsageError`` for others is the caller's)."""
    kind = getattr(getattr(model, "config", None), "model_type", None)
    return kind if kind in ("gpt2", "llama") else "unsupported"


class FullForward(nn.Module):
    """The single forward: token ids ``(1, T)`` -> logits ``(1, T, vocab)``, no cache."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model: Any = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


class CachedStep(nn.Module):
    def __init__(self, model: Any, cache_length: int, write_offset: int = 0, rope_offset: bool = True) -> None:
        super().__init__()
        self.model: Any = model
        self.kind = family_of(model)
        self.cache_length, self.write_offset, self.rope_offset = cache_length, write_offset, rope_offset
        config = model.config
        self.heads: int = config.num_attention_heads
        self.layers, self.kv_heads, _, self.head_dim = cache_shape(model, cache_length)

    def forward(self, input_ids: torch.Tensor, position: torch.Tensor, past_key: torch.Tensor,
                past_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        slots = torch.arange(self.cache_length, dtype=position.dtype)
        write = (slots == position + self.write_offset)[:, None]  # (S, 1): the slot this token's key and value go to
        visible = (slots <= position)[None, None, :]  # (1, 1, S)
        if self.kind == "gpt2":
            body: Any = self.model.transformer
            hidden = (body.wte(input_ids) + body.wpe(position))[None]  # (1, 1, E)
            blocks, final_norm = body.h, body.ln_f
        else:
            body = self.model.model
            hidden = body.embed_tokens(input_ids)[None]
            blocks, final_norm = body.layers, body.norm
            rope_at = position if self.rope_offset else torch.zeros_like(position)
            cos, sin = body.rotary_emb(hidden, rope_at[None])
        keys, values = [], []
        for index, block in enumerate(blocks):
            if self.kind == "gpt2":
                query, key, value = block.attn.c_attn(block.ln_1(hidden)).split(self.heads * self.head_dim, dim=2)
            else:
                normed = block.input_layernorm(hidden)
                query, key, value = block.self_attn.q_proj(normed), block.self_attn.k_proj(normed), block.self_attn.v_proj(normed)
            query = query.view(1, self.heads, 1, self.head_dim)
            key = key.view(1, self.kv_heads, 1, self.head_dim)
            value = value.view(self.kv_heads, 1, self.head_dim)
            if self.kind == "llama":
                from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

                query, key = apply_rotary_pos_emb(query, key, cos, sin)
            cached_key = torch.where(write, key[0], past_key[index])  # (kv_heads, S, D)
            cached_value = torch.where(write, value, past_value[index])
            keys.append(cached_key)
            values.append(cached_value)
            attended = self._attend(query[0], cached_key, cached_value, visible)  # (1, 1, H*D)
            if self.kind == "gpt2":
                hidden = hidden + block.attn.c_proj(attended)
                hidden = hidden + block.mlp(block.ln_2(hidden))
            else:
                hidden = hidden + block.self_attn.o_proj(attended)
                hidden = hidden + block.mlp(block.post_attention_layernorm(hidden))
        logits = self.model.lm_head(final_norm(hidden))[0]  # (1, vocab)
        return logits, torch.stack(keys), torch.stack(values)

    def _attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        repeat = self.heads // self.kv_heads  # grouped-query attention: each key/value head serves `repeat` query heads
        key, value = key.repeat_interleave(repeat, dim=0), value.repeat_interleave(repeat, dim=0)
        scores = query @ key.transpose(1, 2) * self.head_dim ** -0.5  # (H, 1, S)
        scores = scores.masked_fill(~visible, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)
        return (weights @ value).reshape(1, 1, self.heads * self.head_dim)


def empty_cache(model: Any, cache_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = cache_shape(model, cache_length)
    return torch.zeros(shape), torch.zeros(shape)


class BufferedCacheStep(nn.Module):
    """The decode step as ExecuTorch's LLM runner calls it: ``logits = forward(tokens (1, 1), input_pos (1,))``,
    the KV cache held inside as mutable buffers (no cache crosses the call)."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor

    def __init__(self, model: Any, cache_length: int, **bugs: Any) -> None:
        super().__init__()
        self.step = CachedStep(model, cache_length, **bugs)
        key, value = empty_cache(model, cache_length)
        self.register_buffer("k_cache", key)
        self.register_buffer("v_cache", value)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        logits, key, value = self.step(tokens[0], input_pos, self.k_cache, self.v_cache)
        self.k_cache.copy_(key)
        self.v_cache.copy_(value)
        return logits
