"""Two small decoder-only language models built from `transformers` configs (issue 45).

``gpt2_tiny`` is GPT-2 shaped (learned positions, LayerNorm, GELU MLP, tied embeddings) and
``llama_tiny`` Llama shaped (RoPE, RMSNorm, SwiGLU, grouped-query attention: 4 query heads share
2 key/value heads). Both read the vocabulary of ``models/checkpoints/decoder_tokenizer.json``
(512 byte-level BPE tokens) and hold at most ``MAX_POSITIONS`` positions. They are trained by
``models/train_decoders.py`` on the Python reference manual that CPython ships
(``pydoc_data.topics``); the checkpoints hold fp16 weights.

    >>> model = llama_tiny()
    >>> model.load_state_dict(torch.load("models/checkpoints/llama_tiny.pth", weights_only=True))
"""

from __future__ import annotations

import torch

VOCAB_SIZE = 512
MAX_POSITIONS = 256


def _eager(model: torch.nn.Module) -> torch.nn.Module:
    # "eager" attention: the same numbers in every exporter; sdpa's fused kernels differ by exporter
    model.eval()
    return model


def gpt2_tiny() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB_SIZE, n_positions=MAX_POSITIONS, n_embd=160, n_layer=4, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                        attn_implementation="eager")
    return _eager(GPT2LMHeadModel(config))


def llama_tiny() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=160, intermediate_size=432, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS,
                         rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    return _eager(LlamaForCausalLM(config))


DECODERS = {"gpt2_tiny": gpt2_tiny, "llama_tiny": llama_tiny}
