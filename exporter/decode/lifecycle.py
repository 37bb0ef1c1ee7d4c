"""``golden record`` and ``golden approve`` on a generative set (``golden verify``: goldenset.verify_lines).

Recording runs the eager model's full forward, without a cache: per prompt its greedy continuation
of ``new_tokens`` and its teacher-forced logits over prompt + continuation. Approving computes the
same with a reviewed checkpoint and prints, before writing anything, which prompts' generations
change (the first changed step, both tokens as text) and the perplexity of the continuations.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from ..files import sha256_file
from ..model import load_model, pinned_threads
from ..versions import library_versions
from . import goldenset, reference, verdicts


def _eager(checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None, prompts: list[np.ndarray], new_tokens: int):
    with pinned_threads(1):
        model = load_model(checkpoint, arch, arch_kwargs, arch_root)
        return reference.eager_reference(model, prompts, new_tokens)


def _model_info(checkpoint: Path, arch: str) -> dict[str, Any]:
    return {"checkpoint_sha256": sha256_file(checkpoint), "arch": arch}


def record(checkpoint: Path, arch: str, inputs_dir: Path, golden_dir: Path, force: bool = False,
           arch_kwargs: dict[str, Any] | None = None, arch_root: Path | None = None) -> goldenset.GenerativeSet:
    golden_dir = Path(golden_dir)
    if (golden_dir / goldenset.MANIFEST).exists() and not force:
        raise UsageError(f"{golden_dir}: already holds a golden set; pass --force to replace it, or golden approve to adopt a new model")
    names, texts, prompts, tokenizer, new_tokens = goldenset.read_prompts(inputs_dir)
    continuations, logits = _eager(checkpoint, arch, arch_kwargs or {}, arch_root, prompts, new_tokens)
    goldenset.write_set(golden_dir, names, texts, prompts, continuations, logits, new_tokens, tokenizer,
                        _model_info(checkpoint, arch), library_versions(()))
    return goldenset.load_set(golden_dir)


@dataclass(frozen=True)
class GenerationDiff:
    checkpoint_before: str
    checkpoint_after: str
    changed: tuple[verdicts.PromptVerdict, ...]  # the prompts whose greedy continuation changes
    prompts: int
    perplexity_before: float  # of the approved continuations under the model that recorded them
    perplexity_after: float  # of the new continuations under the new model

    def lines(self) -> list[str]:
        out = [f"checkpoint {self.checkpoint_before[:12]} -> {self.checkpoint_after[:12]}",
               f"perplexity of the continuations {self.perplexity_before:.3f} -> {self.perplexity_after:.3f}",
               f"generations changed: {len(self.changed)} of {self.prompts} prompts"]
        out += [f"  {p.name}: from step {p.first_step}: {p.expected_text!r} -> {p.got_text!r}" for p in self.changed]
        return out


def _perplexity(prompts, continuations, logits) -> float:
    nll = [verdicts.continuation_nll(x, len(p), c) for p, c, x in zip(prompts, continuations, logits, strict=True)]
    return float(np.exp(np.concatenate(nll).mean()))


def approve(checkpoint: Path, arch: str, golden_dir: Path, dry_run: bool = False, arch_kwargs: dict[str, Any] | None = None,
            arch_root: Path | None = None) -> tuple[GenerationDiff, bool]:
    """``(diff, written)``: the new model's continuations and logits adopted unless ``dry_run`` or nothing changed."""
    old = goldenset.load_set(golden_dir)
    prompts = list(old.prompts)
    continuations, logits = _eager(checkpoint, arch, arch_kwargs or {}, arch_root, prompts, old.new_tokens)
    decode = old.decoder()
    changed = []
    for name, before, after in zip(old.names, old.continuations, continuations, strict=True):
        step = verdicts.first_divergence(before, after)
        if step is not None:
            changed.append(verdicts.PromptVerdict(name, 0, False, step, int(before[step]), int(after[step]),
                                                  decode([int(before[step])]), decode([int(after[step])])))
    info = _model_info(checkpoint, arch)
    diff = GenerationDiff(str(old.manifest["model"].get("checkpoint_sha256", "")), info["checkpoint_sha256"], tuple(changed), len(prompts),
                          _perplexity(prompts, old.continuations, old.logits), _perplexity(prompts, continuations, logits))
    same = all(np.array_equal(a, b) for a, b in zip(old.logits, logits, strict=True)) and not changed
    if dry_run or same:
        return diff, False
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = goldenset.copy_tokenizer(old, Path(scratch))
        goldenset.write_set(Path(golden_dir), list(old.names), list(old.texts), prompts, continuations, logits, old.new_tokens,
                            tokenizer, info, library_versions(()))
    return diff, True
