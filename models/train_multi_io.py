"""Train the multi-input/output models (``models/multi_io.py``) on scikit-learn's digits and save bare state_dicts.

Run from the repository root::

    python -m models.train_multi_io                          # all four, then the reload and export self-check
    python -m models.train_multi_io --model token_classifier # one model; other rows of the json are kept
    python -m models.train_multi_io --no-export-check

Writes ``<out>/{digit_detector,sequence_recognizer,token_classifier,two_input_net}.pth``
(``torch.save(model.state_dict(), path)`` after ``model.eval()``) and updates
``<out>/multi_io_accuracy.json`` with held-out metrics. Then every checkpoint is reloaded into a
fresh model and re-measured, and ``torch.jit.trace``, ``torch.jit.script`` and the legacy ONNX
exporter (opset 17, dynamic axes) are tried on it; each artifact is run at a batch size and
sequence length different from the export example and compared with eager. Seeded, deterministic
algorithms, 2 threads: a rerun on the same software stack reproduces the checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

if __package__ in (None, ""):  # run as a file path: put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.multi_io import (  # noqa: E402
    BLANK,
    MULTI_IO_ARCHITECTURES,
    PAD_ID,
    DigitDetector,
    DigitDetectorDict,
    SequenceRecognizer,
    TokenClassifier,
    TokenClassifierStock,
    TwoInputNet,
)
from models.multi_io_data import (  # noqa: E402
    MAX_TOKENS,
    MIN_TOKENS,
    SEQUENCE_LENGTHS,
    Example,
    detector_example,
    heldout,
    load_split,
    random_offsets,
    sequence_example,
    stack,
    tokens,
    two_input_example,
)

HELDOUT_COUNT = 360
BATCH_SIZE = 64
# Per-model recipe: epochs, peak AdamW learning rate, training items per epoch (None: every training digit once).
RECIPES: dict[str, dict[str, Any]] = {
    "digit_detector": {"epochs": 30, "lr": 3e-3, "items": None},
    "sequence_recognizer": {"epochs": 20, "lr": 6e-3, "items": 3072},
    "token_classifier": {"epochs": 30, "lr": 3e-3, "items": None},
    "two_input_net": {"epochs": 15, "lr": 3e-3, "items": None},
}
Batch = tuple[dict[str, torch.Tensor], Any]


def tensors(examples: list[Example]) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(arr) for name, arr in stack(examples).items()}


def training_batches(name: str, epoch: int, seed: int, items: int | None) -> Iterator[Batch]:
    """One epoch of shuffled training batches for model ``name`` (training digits only, seeded by epoch)."""
    digits, labels, train_idx, _ = load_split()
    rng = np.random.RandomState(seed * 1000 + epoch)
    order = train_idx[rng.permutation(len(train_idx))]
    if name == "sequence_recognizer":
        count = items or len(train_idx)
        for b, start in enumerate(range(0, count, BATCH_SIZE)):
            k = SEQUENCE_LENGTHS[b % len(SEQUENCE_LENGTHS)]
            chosen = train_idx[rng.randint(0, len(train_idx), size=(min(BATCH_SIZE, count - start), k))]
            yield tensors([sequence_example(digits[row], labels[row]) for row in chosen]), torch.from_numpy(labels[chosen])
        return
    for start in range(0, len(order), BATCH_SIZE):
        idx = order[start : start + BATCH_SIZE]
        y = torch.from_numpy(labels[idx])
        if name == "digit_detector":
            examples = [detector_example(digits[i], int(labels[i]), *random_offsets(rng)) for i in idx]
            yield tensors(examples), (y, torch.from_numpy(np.stack([box for _, (_, box) in examples])))
        elif name == "token_classifier":
            lengths = rng.randint(MIN_TOKENS, MAX_TOKENS + 1, size=len(idx))
            padded_to = int(lengths.max())  # right-pad within the batch
            yield tensors([(tokens(digits[i], int(n), padded_to), 0) for i, n in zip(idx, lengths, strict=True)]), y
        else:
            yield tensors([two_input_example(digits[i], int(labels[i])) for i in idx]), y


def loss_of(name: str, model: nn.Module, inputs: dict[str, torch.Tensor], target: Any) -> torch.Tensor:
    out = model(**inputs)
    if name == "digit_detector":
        labels, boxes = target
        return F.cross_entropy(out[1], labels) + 5.0 * F.l1_loss(out[0], boxes)
    if name == "sequence_recognizer":
        t, n = out.shape[:2]
        return F.ctc_loss(
            out,
            target + 1,  # class d + 1 is digit d, 0 is blank
            torch.full((n,), t, dtype=torch.long),
            torch.full((n,), target.shape[1], dtype=torch.long),
            blank=BLANK,
            zero_infinity=True,
        )
    return F.cross_entropy(out, target, label_smoothing=0.05)


def greedy_ctc(log_probs: torch.Tensor) -> list[list[int]]:
    """Best-path decoding of ``(T, N, C)``: argmax per frame, merge repeats, drop blanks; digits as ints."""
    best = log_probs.argmax(-1).T.tolist()  # (N, T)
    decoded = []
    for path in best:
        merged = [c for i, c in enumerate(path) if c != BLANK and (i == 0 or c != path[i - 1])]
        decoded.append([c - 1 for c in merged])
    return decoded


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise IoU of two ``(N, 4)`` x0, y0, x1, y1 box tensors."""
    lo, hi = torch.maximum(a[:, :2], b[:, :2]), torch.minimum(a[:, 2:], b[:, 2:])
    inter = (hi - lo).clamp(min=0).prod(1)
    area = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(1) + (b[:, 2:] - b[:, :2]).prod(1)
    return inter / (area - inter)


def by_shape(examples: list[Example]) -> Iterator[list[int]]:
    """Positions of ``examples`` grouped by input shapes (so each group stacks into one batch)."""
    groups: dict[tuple, list[int]] = {}
    for i, (inputs, _) in enumerate(examples):
        groups.setdefault(tuple(a.shape for a in inputs.values()), []).append(i)
    yield from groups.values()


@torch.inference_mode()
def evaluate(name: str, model: nn.Module, examples: list[Example]) -> dict[str, float]:
    """Held-out metrics of model ``name`` on ``examples`` (see models/README.md for their meaning)."""
    model.eval()
    hits = 0.0
    ious: list[torch.Tensor] = []
    per_length: dict[int, list[int]] = {}
    pad_diff = 0.0
    for group in by_shape(examples):
        batch = [examples[i] for i in group]
        inputs = tensors(batch)
        out = model(**inputs)
        if name == "digit_detector":
            boxes, scores = (out["boxes"], out["scores"]) if isinstance(out, dict) else out
            hits += float((scores.argmax(1) == torch.tensor([t[0] for _, t in batch])).sum())
            ious.append(box_iou(boxes, torch.from_numpy(np.stack([t[1] for _, t in batch]))))
        elif name == "sequence_recognizer":
            ok = [p == t for p, (_, t) in zip(greedy_ctc(out), batch, strict=True)]
            per_length.setdefault(len(batch[0][1]), []).extend(ok)
            hits += sum(ok)
        else:
            hits += float((out.argmax(1) == torch.tensor([t for _, t in batch])).sum())
        extra = MAX_TOKENS - inputs["input_ids"].shape[1] if name == "token_classifier" else 0
        if extra:  # the same rows right-padded to MAX_TOKENS must give the same logits
            padded = model(F.pad(inputs["input_ids"], (0, extra), value=PAD_ID), F.pad(inputs["attention_mask"], (0, extra)))
            pad_diff = max(pad_diff, float((padded - out).abs().max()))
    metrics = {"accuracy" if name != "sequence_recognizer" else "sequence_accuracy": hits / len(examples)}
    if name == "digit_detector":
        iou = torch.cat(ious)
        metrics.update(mean_iou=float(iou.mean()), iou_at_0_5=float((iou >= 0.5).float().mean()))
    if name == "sequence_recognizer":
        metrics.update({f"sequence_accuracy_{k}_digits": sum(v) / len(v) for k, v in sorted(per_length.items())})
    if name == "token_classifier":
        metrics["padding_max_abs_diff"] = pad_diff
    return {k: round(v, 6) for k, v in metrics.items()}


def train_one(name: str, out: Path, seed: int, epochs: int | None) -> dict[str, Any]:
    recipe = RECIPES[name]
    epochs = epochs or recipe["epochs"]
    torch.manual_seed(seed)
    model = MULTI_IO_ARCHITECTURES[name]()
    steps = sum(1 for _ in training_batches(name, 0, seed, recipe["items"]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"], weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=recipe["lr"], total_steps=epochs * steps, pct_start=0.15)
    examples = heldout(name, HELDOUT_COUNT)
    started, cpu_started = time.perf_counter(), time.process_time()
    for epoch in range(epochs):
        model.train()
        total, count = 0.0, 0
        for inputs, target in training_batches(name, epoch, seed, recipe["items"]):
            loss = loss_of(name, model, inputs, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
            total, count = total + float(loss.detach()), count + 1
        if epoch == epochs - 1 or (epoch + 1) % 5 == 0:
            print(f"  {name} epoch {epoch + 1}/{epochs} loss {total / count:.4f} held-out {evaluate(name, model, examples)}", flush=True)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    model.eval()
    path = out / f"{name}.pth"
    torch.save(model.state_dict(), path)
    return {
        "model": name,
        "class": type(model).__name__,
        **evaluate(name, model, examples),
        "heldout_count": len(examples),
        "epochs": epochs,
        "lr": recipe["lr"],
        "seconds": round(seconds, 1),  # wall clock, training only (other jobs on the machine inflate it)
        "cpu_seconds": round(cpu_seconds, 1),  # CPU time over all threads
        "params": sum(p.numel() for p in model.parameters()),
        "file": path.name,
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "seed": seed,
        "torch": torch.__version__,
    }


# ---- self-check: reload, then trace / script / ONNX with dynamic axes -------------------------------------------


def export_spec(name: str) -> dict[str, Any]:
    """Output names, dynamic axes, and the example and other-shape held-out inputs for exporting model ``name``."""
    if name == "digit_detector":
        axes = {"x": {0: "batch"}, "boxes": {0: "batch"}, "scores": {0: "batch"}}
        return {"outputs": ["boxes", "scores"], "axes": axes, "ex": heldout(name, 2), "alt": heldout(name, 5)[2:]}
    if name == "sequence_recognizer":
        items = heldout(name, 12)  # groups of 4 with W = 48, 64, 80: export at W = 64, run at W = 80
        axes = {"image": {0: "batch", 3: "width"}, "log_probs": {0: "time", 1: "batch"}}
        return {"outputs": ["log_probs"], "axes": axes, "ex": items[4:6], "alt": items[9:12]}
    if name == "token_classifier":
        items = heldout(name, 8)  # export at L = 48, run at L = 64 (the last row padded)
        batch_length = {0: "batch", 1: "length"}
        axes = {"input_ids": batch_length, "attention_mask": batch_length, "logits": {0: "batch"}}
        return {"outputs": ["logits"], "axes": axes, "ex": items[4:6], "alt": items[1:4]}
    axes = {"image": {0: "batch"}, "meta": {0: "batch"}, "logits": {0: "batch"}}
    return {"outputs": ["logits"], "axes": axes, "ex": heldout(name, 2), "alt": heldout(name, 5)[2:]}


def flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return list(out.values() if isinstance(out, dict) else out)


def max_diff(got: list[Any], want: list[torch.Tensor]) -> float:
    if len(got) != len(want):
        raise RuntimeError(f"{len(got)} outputs, eager has {len(want)}")
    return max(float((torch.as_tensor(g) - w).abs().max()) for g, w in zip(got, want, strict=True))


@contextlib.contextmanager
def quiet_fds() -> Iterator[None]:
    """Send file descriptors 1 and 2 to /dev/null (the ONNX exporter's C++ side prints whole graphs on failure)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null:
        try:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def attempt(run: Callable[[], float]) -> str:
    """``ok (max |diff| vs eager)``, ``MISMATCH (...)`` above 1e-4, or ``FAIL: <error>``."""
    try:
        with warnings.catch_warnings(), quiet_fds():
            warnings.simplefilter("ignore")
            diff = run()
    except Exception as exc:  # report, never fix: this is a compatibility probe
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"FAIL: {type(exc).__name__}: {first[:160]}"
    return f"{'ok' if diff <= 1e-4 else 'MISMATCH'} ({diff:.1e})"


def export_check(name: str, model: nn.Module) -> dict[str, str]:
    """Try trace (no_grad, as export-check does), script and legacy ONNX; run each at other shapes vs eager."""
    import onnx
    import onnxruntime as ort

    spec = export_spec(name)
    ex, alt = tensors(spec["ex"]), tensors(spec["alt"])
    names = list(ex)
    with torch.inference_mode():
        want = flat(model(**alt))

    def jit_roundtrip(module: torch.jit.ScriptModule) -> float:
        buffer = io.BytesIO()
        torch.jit.save(module, buffer)
        buffer.seek(0)
        loaded = torch.jit.load(buffer)
        with torch.inference_mode():
            return max_diff(flat(loaded(*alt.values())), want)

    notes: list[str] = []

    def trace() -> float:
        with torch.no_grad():
            try:
                traced = torch.jit.trace(model, tuple(ex.values()), check_trace=False)
            except RuntimeError as exc:  # dict outputs need strict=False
                if "strict=False" not in str(exc):
                    raise
                notes.append(f"; the default strict=True fails ({str(exc)[:60]}...), this is with strict=False")
                traced = torch.jit.trace(model, tuple(ex.values()), check_trace=False, strict=False)
        return jit_roundtrip(traced)

    def onnx_export(grad: bool) -> float:
        with tempfile.TemporaryDirectory() as tmp, torch.set_grad_enabled(grad):
            path = Path(tmp) / f"{name}.onnx"
            torch.onnx.export(model, tuple(ex.values()), str(path), dynamo=False, opset_version=17, input_names=names,
                              output_names=spec["outputs"], dynamic_axes=spec["axes"])
            onnx.checker.check_model(str(path), full_check=True)
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.log_severity_level = 4  # the failure is reported as an exception; keep ORT's own log quiet
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            return max_diff(session.run(None, {k: v.numpy() for k, v in alt.items()}), want)

    traced = attempt(trace)
    return {
        "trace": traced + "".join(notes),
        "script": attempt(lambda: jit_roundtrip(torch.jit.script(model))),
        "onnx": attempt(lambda: onnx_export(grad=True)),
        "onnx_no_grad": attempt(lambda: onnx_export(grad=False)),
    }


def self_check(out: Path, names: list[str], results: dict[str, dict[str, Any]], exports: bool) -> None:
    """Reload each checkpoint into fresh models, re-measure, and probe the exporters; print what works."""
    variants: dict[str, list[type[nn.Module]]] = {
        "digit_detector": [DigitDetector, DigitDetectorDict],
        "sequence_recognizer": [SequenceRecognizer],
        "token_classifier": [TokenClassifier, TokenClassifierStock],
        "two_input_net": [TwoInputNet],
    }
    rows = []
    for name in names:
        state = torch.load(out / f"{name}.pth", weights_only=True, map_location="cpu")
        for cls in variants[name]:
            model = cls()
            model.load_state_dict(state)
            model.eval()
            metrics = evaluate(name, model, heldout(name, HELDOUT_COUNT))
            recorded = {k: results[name][k] for k in metrics}
            same = "matches the json" if metrics == recorded else f"DIFFERS from the json {recorded}"
            print(f"reloaded {name}.pth into {cls.__name__}: {metrics} ({same})", flush=True)
            if exports:
                rows.append((cls.__name__, export_check(name, model)))
    if rows:
        print("\nexport check: trace under no_grad (as export-check does), script, legacy ONNX (opset 17, dynamic axes) with grad on")
        print("(as export-check does) and under no_grad; every artifact is reloaded and run at another batch size / length vs eager:")
        print("| model | torch.jit.trace | torch.jit.script | torch.onnx.export | torch.onnx.export under no_grad |\n| --- | --- | --- | --- | --- |")
        for cls_name, row in rows:
            print(f"| {cls_name} | {row['trace']} | {row['script']} | {row['onnx']} | {row['onnx_no_grad']} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all", choices=["all", *MULTI_IO_ARCHITECTURES], help="model (default all)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: per-model recipe)")
    parser.add_argument("--out", type=Path, default=Path("models/checkpoints"), help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-export-check", action="store_true", help="skip the trace/script/ONNX probe")
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        parser.error("--epochs must be >= 1")

    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "multi_io_accuracy.json"
    results: dict[str, dict[str, Any]] = json.loads(results_path.read_text()) if results_path.exists() else {}
    names = list(MULTI_IO_ARCHITECTURES) if args.model == "all" else [args.model]
    for name in names:
        print(f"training {name}", flush=True)
        results[name] = train_one(name, args.out, args.seed, args.epochs)
        r = results[name]
        print(f"{name}: {r['seconds']} s ({r['cpu_seconds']} s CPU), {r['params']:,} params, {r['bytes']:,} bytes", flush=True)
    ordered = {n: results[n] for n in MULTI_IO_ARCHITECTURES if n in results}
    results_path.write_text(json.dumps(ordered, indent=2) + "\n")
    self_check(args.out, names, results, exports=not args.no_export_check)
    print(f"\ntotal {time.perf_counter() - started:.1f} s ({time.process_time():.1f} s CPU) on {torch.get_num_threads()} threads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
