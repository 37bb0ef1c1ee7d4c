"""Verdicts on tokens (pure numpy): what an artifact's stepped logits and generations are worth.

Per position (teacher-forced on the approved continuation): logit MAE, KL divergence from the
reference's distribution to the artifact's (mean and worst), top-1 agreement. Per prompt: the greedy
continuation equal or not, and the first divergent step with both tokens. Over the set: the
perplexity of the approved continuation under the artifact.

    >>> ref = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]], np.float32))
    >>> round(float(kl_per_position(ref, ref[::-1])[0]), 4)  # 0.7 ln 7 + 0.2 ln 0.25
    1.0849
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PromptVerdict:
    name: str
    prompt_tokens: int
    equal: bool
    first_step: int | None = None  # the first generated step (0-based) whose token differs
    expected: int | None = None  # the reference's token there, and the artifact's
    got: int | None = None
    expected_text: str = ""
    got_text: str = ""

    @property
    def position(self) -> int | None:
        """The sequence position the divergent token is generated from (prompt + step - 1 is fed; this is its index)."""
        return None if self.first_step is None else self.prompt_tokens + self.first_step

    def to_json(self) -> dict:
        return {"name": self.name, "prompt_tokens": self.prompt_tokens, "equal": self.equal, "first_step": self.first_step,
                "position": self.position, "expected": self.expected, "got": self.got,
                "expected_text": self.expected_text, "got_text": self.got_text}


@dataclass(frozen=True)
class TokenVerdict:
    positions: int
    mae: float
    max_abs: float
    kl_mean: float
    kl_worst: float
    top1_agreement: float
    perplexity: float  # of the approved continuation under the artifact
    reference_perplexity: float
    prompts: tuple[PromptVerdict, ...]
    per_prompt_mae: tuple[float, ...]

    @property
    def diverged(self) -> tuple[PromptVerdict, ...]:
        return tuple(p for p in self.prompts if not p.equal)

    @property
    def generations_equal(self) -> int:
        return sum(p.equal for p in self.prompts)

    def to_json(self) -> dict:
        return {"positions": self.positions, "mae": self.mae, "max_abs": self.max_abs, "kl_mean": self.kl_mean,
                "kl_worst": self.kl_worst, "top1_agreement": self.top1_agreement, "perplexity": self.perplexity,
                "reference_perplexity": self.reference_perplexity, "perplexity_change": self.perplexity - self.reference_perplexity,
                "generations_equal": self.generations_equal, "prompts": [p.to_json() for p in self.prompts],
                "per_prompt_mae": list(self.per_prompt_mae)}

    @classmethod
    def from_json(cls, data: dict) -> TokenVerdict:
        """The verdict ``to_json`` wrote (a stored report's, judged again); what it derives is derived again."""
        prompts = tuple(PromptVerdict(**{k: v for k, v in p.items() if k != "position"}) for p in data["prompts"])
        return cls(**{k: data[k] for k in ("positions", "mae", "max_abs", "kl_mean", "kl_worst", "top1_agreement", "perplexity",
                                           "reference_perplexity")}, prompts=prompts, per_prompt_mae=tuple(data["per_prompt_mae"]))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    wide = logits.astype(np.float64)
    shifted = wide - wide.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def kl_per_position(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """KL(reference || candidate) in nats at each position of two ``(positions, vocab)`` logit arrays."""
    ref, cand = log_softmax(reference), log_softmax(candidate)
    return (np.exp(ref) * (ref - cand)).sum(axis=-1)


def continuation_nll(logits: np.ndarray, prompt_tokens: int, continuation: np.ndarray) -> np.ndarray:
    """The negative log-likelihood of each continuation token under teacher-forced ``logits`` over prompt + continuation."""
    predicting = log_softmax(logits[prompt_tokens - 1:prompt_tokens - 1 + len(continuation)])
    return -predicting[np.arange(len(continuation)), continuation]


def first_divergence(expected: np.ndarray, got: np.ndarray) -> int | None:
    differs = np.flatnonzero(np.asarray(expected) != np.asarray(got))
    return None if differs.size == 0 else int(differs[0])


def token_verdict(names: list[str], prompts: list[np.ndarray], approved: list[np.ndarray], reference_logits: list[np.ndarray],
                  reference_generated: list[np.ndarray], forced: tuple[np.ndarray, ...], generated: tuple[np.ndarray, ...],
                  decode) -> TokenVerdict:
    """Judge numbers only: ``decode(token_ids) -> str`` shows the divergent tokens as text."""
    errors, kls, agree, nll, ref_nll, verdicts, per_prompt = [], [], [], [], [], [], []
    for i, name in enumerate(names):
        ref, cand = reference_logits[i], forced[i]
        if cand.shape != ref.shape:
            raise ValueError(f"prompt {name}: the artifact gave logits of shape {cand.shape}, the reference {ref.shape}")
        error = np.abs(cand.astype(np.float64) - ref)
        errors.append(error)
        per_prompt.append(float(error.mean()))
        kls.append(kl_per_position(ref, cand))
        agree.append(np.argmax(ref, axis=-1) == np.argmax(cand, axis=-1))
        nll.append(continuation_nll(cand, len(prompts[i]), approved[i]))
        ref_nll.append(continuation_nll(ref, len(prompts[i]), approved[i]))
        step = first_divergence(reference_generated[i], generated[i])
        if step is None:
            verdicts.append(PromptVerdict(name, len(prompts[i]), True))
        else:
            want, got = int(reference_generated[i][step]), int(generated[i][step])
            verdicts.append(PromptVerdict(name, len(prompts[i]), False, step, want, got, decode([want]), decode([got])))
    every_error, every_kl = np.concatenate([e.ravel() for e in errors]), np.concatenate(kls)
    return TokenVerdict(
        positions=int(every_kl.size), mae=float(every_error.mean()), max_abs=float(every_error.max()),
        kl_mean=float(every_kl.mean()), kl_worst=float(every_kl.max()), top1_agreement=float(np.concatenate(agree).mean()),
        perplexity=float(np.exp(np.concatenate(nll).mean())), reference_perplexity=float(np.exp(np.concatenate(ref_nll).mean())),
        prompts=tuple(verdicts), per_prompt_mae=tuple(per_prompt))


def runner_disagreement(names: list[str], runner: tuple[str, ...] | None, generated: tuple[np.ndarray, ...], decode,
                        eos: int | None) -> tuple[str, ...]:
    """Where a runtime's own runner (``runner``: its text per prompt) generated other text than the stepped loop's
    ``generated`` tokens up to EOS, each prompt named; a runner's text that starts with NUL says it raised there, and is
    not compared (the row's note says so)."""
    if runner is None:
        return ()
    differing = []
    for name, text, tokens in zip(names, runner, generated, strict=True):
        if text.startswith("\0"):
            continue
        ids = [int(t) for t in tokens]
        stepped_text = decode(ids[:ids.index(eos)] if eos in ids else ids)
        if text != stepped_text:
            differing.append(f"prompt {name}: runner {text!r}, stepped {stepped_text!r}")
    if not differing:
        return ()
    return (f"ExecuTorch's runner (TextLLMRunner) and the stepped loop disagree on {len(differing)} of {len(names)} prompts; first: "
            f"{differing[0]}",)
