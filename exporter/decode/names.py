"""The names of a language model's kinds, read without importing torch: what ``--artifacts`` takes when the golden set is
generative (RunConfig checks them; a settings file's ``artifacts`` may name them)."""

from __future__ import annotations

# A language model's kinds, in the order of kinds.KINDS (tests/unit/decode/test_kinds.py holds the two equal)
KIND_NAMES = ("full-forward", "decode-torch-export", "decode-onnx", "decode-executorch", "decode-executorch-runner",
              "decode-torchao-int8", "decode-torchao-int4")


def unknown_kinds_message(unknown: list[str]) -> str:
    """The one line that refuses ``unknown`` kind names for a language model, with its kinds."""
    return (f"unknown language-model kind(s) {', '.join(unknown)}; a generative golden set is checked with the kinds "
            f"{', '.join(KIND_NAMES)}")
