"""Tiny transformers models built from configs (no download), for the output-kind tests; transformers is optional."""

from __future__ import annotations

from typing import Any

VOCAB = 99


def _bert_config(**extra: Any) -> Any:
    from transformers import BertConfig

    return BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                      max_position_embeddings=64, **extra)


def tiny_bert() -> Any:
    """``BertModel``: ``last_hidden_state (N, L, 32)`` and ``pooler_output (N, 32)``."""
    from transformers import BertModel

    return BertModel(_bert_config())


def tiny_bert_classifier() -> Any:
    """``BertForSequenceClassification`` with 3 labels, returning its hidden states too: ``logits (N, 3)`` and
    ``hidden_states.0`` .. ``hidden_states.2`` ``(N, L, 32)`` (the embeddings' and each layer's, after LayerNorm)."""
    from transformers import BertForSequenceClassification

    return BertForSequenceClassification(_bert_config(num_labels=3, output_hidden_states=True))
