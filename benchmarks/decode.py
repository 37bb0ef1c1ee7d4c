"""Language models (issue 45): every decode kind on both bundled decoders, 16 held-out prompts x 32 tokens.

For each decoder: a generative golden set recorded from 16 prompts (the first words of lines of the
held-out 5% of the training text, which the models never saw), then ``run_generation`` builds, steps
and judges every kind; and a straight-line decode loop written by hand: the eager model with its own
``transformers`` cache, token by token, no export, no child process. Reported per kind: the token
verdicts (MAE, KL mean/worst, top-1 agreement, generations equal, perplexity), the build seconds, and
the seconds per decode step in the stepper child (load included, so an upper bound) against the
hand loop's. Run from the repository root::

    nice python benchmarks/decode.py --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from export_check.config import RunConfig  # noqa: E402
from export_check.decode import lifecycle  # noqa: E402
from export_check.decode.run import run_generation  # noqa: E402
from export_check.model import load_model  # noqa: E402
from models.train_decoders import corpus_text  # noqa: E402

PROMPTS, NEW_TOKENS = 16, 32


def held_out_prompts(count: int) -> list[str]:
    text = corpus_text()
    tail = text[int(len(text) * 0.95):]
    lines = [" ".join(line.split()[:5]) for line in tail.splitlines() if len(line.split()) >= 6 and line[:1].isalpha()]
    step = max(1, len(lines) // count)
    return lines[::step][:count]


def hand_loop_seconds_per_step(model, prompts: list[np.ndarray]) -> tuple[float, int]:
    """The eager model with its own cache, a token a step, greedy: seconds per step and steps."""
    steps, began = 0, time.perf_counter()
    with torch.inference_mode():
        for prompt in prompts:
            out = model(input_ids=torch.from_numpy(prompt)[None], use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            steps += len(prompt)
            for _ in range(NEW_TOKENS - 1):
                out = model(input_ids=token, cache=cache, use_cache=True)
                cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
                steps += 1
    return (time.perf_counter() - began) / steps, steps


def bench(name: str, folder: Path) -> dict:
    checkpoint, arch = ROOT / "models" / "checkpoints" / f"{name}.pth", f"{ROOT / 'models' / 'decoders.py'}:{name}"
    inputs = folder / "prompts"
    inputs.mkdir()
    (inputs / "prompts.txt").write_text("\n".join(held_out_prompts(PROMPTS)) + "\n")
    shutil.copyfile(ROOT / "models" / "checkpoints" / "decoder_tokenizer.json", inputs / "tokenizer.json")
    (inputs / "generation.json").write_text(json.dumps({"new_tokens": NEW_TOKENS}))
    golden = lifecycle.record(checkpoint, arch, inputs, folder / "golden")
    torch.set_num_threads(1)
    model = load_model(checkpoint, arch, {}, None)
    hand, _ = hand_loop_seconds_per_step(model, list(golden.prompts))
    report = run_generation(RunConfig(checkpoint=checkpoint, arch=arch, golden=folder / "golden", out_dir=folder / "out"))
    # each stepper child runs a teacher-forced loop (P + N steps) and a greedy one (P + N - 1) per prompt
    stepped = sum(2 * (len(p) + NEW_TOKENS) - 1 for p in golden.prompts)
    rows = {}
    for row in report.rows:
        verdict = json.loads(dict(row.details).get("token_verdict", "{}"))
        rows[row.name] = {"status": row.status, "reasons": list(row.reasons), "build_seconds": row.build_seconds,
                          **{k: verdict.get(k) for k in ("mae", "kl_mean", "kl_worst", "top1_agreement", "generations_equal",
                                                         "perplexity", "perplexity_change")}}
        if row.replay_seconds:
            per_step = row.replay_seconds / stepped  # full-forward: a step is a whole-sequence forward
            rows[row.name].update(seconds_per_step=per_step, vs_hand_loop=per_step / hand)
    return {"prompts": len(golden), "new_tokens": NEW_TOKENS, "hand_loop_seconds_per_step": hand, "rows": rows,
            "passed": report.passed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--models", default="gpt2_tiny,llama_tiny")
    args = parser.parse_args()
    results = {}
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as folder:
            results[name] = bench(name, Path(folder))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, result in results.items():
        hand = result["hand_loop_seconds_per_step"] * 1e3
        print(f"{name}: {result['prompts']} prompts x {result['new_tokens']} tokens; hand loop {hand:.2f} ms/step")
        for kind, row in result["rows"].items():
            print(f"  {kind:20s} {row['status']:5s} MAE {row['mae']:.2e} KL {row['kl_mean']:.2e}/{row['kl_worst']:.2e} "
                  f"top1 {row['top1_agreement']:.4f} gen {row['generations_equal']}/{result['prompts']} ppl {row['perplexity']:.3f}"
                  + (f" {row['seconds_per_step'] * 1e3:.2f} ms/step ({row['vs_hand_loop']:.1f}x)" if "seconds_per_step" in row else ""))


if __name__ == "__main__":
    main()
