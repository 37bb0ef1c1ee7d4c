"""The names of a language model's kinds, read without importing torch: what ``--artifacts`` takes when the golden set is
generative (RunConfig checks them; a settings file's ``artifacts`` may name them)."""

from __future__ import annotations

# A language model's kinds, in the order of kinds.KINDS (tests/unit/decode/test_kinds.py holds the two equal)
KIND_NAMES = ("full-forward", "decode-torch-export", "decode-onnx", "decode-executorch", "decode-executorch-runner",
              "decode-torchao-int8", "decode-torchao-int4")


# The detail of a language model's row that holds what its judge read (decode/rows.py writes it; the views read it)
JUDGE_RECORD = "decode_judge"


def unknown_kinds_message(unknown: list[str]) -> str:
    """The one line that refuses ``unknown`` kind names for a language model, with its kinds."""
    return (f"unknown language-model kind(s) {', '.join(unknown)}; a generative golden set is checked with the kinds "
            f"{', '.join(KIND_NAMES)}")


def resolve(names: tuple[str, ...]) -> tuple[str, ...]:
    """A language model's kind names, its group named: its kinds are one group, which "default" and "all" name (another
    name is kept, for RunConfig to refuse naming the kinds), each once, in the order given.

    >>> resolve(("decode-onnx", "all"))[:2]
    ('decode-onnx', 'full-forward')
    """
    return tuple(dict.fromkeys(k for n in names for k in (KIND_NAMES if n in ("default", "all") else (n,))))
