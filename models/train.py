"""Train the bundled architectures on scikit-learn's digits and save bare state_dicts.

Run from the repository root::

    python -m models.train                      # all four architectures, default epochs
    python -m models.train --arch vit --epochs 40
    python -m models.train --out models/checkpoints

Writes ``<out>/<arch>_digits.pth`` (``torch.save(model.state_dict(), path)`` after
``model.eval()``, loadable with ``torch.load(path, weights_only=True)``), updates
``<out>/accuracy.json`` and regenerates ``<out>/ACCURACY.md``. Everything is seeded and runs
with deterministic algorithms on 2 threads, so a rerun on the same software stack reproduces the
same checkpoints.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

if __package__ in (None, ""):  # run as a file path: put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models import ARCHITECTURES  # noqa: E402
from models.digits import GOLDEN_COUNT, NUM_CLASSES, digits_split, load_digits_arrays, preprocess_digits  # noqa: E402

IMAGE_SIZE = 32
IN_CHANNELS = 3
BATCH_SIZE = 64
SHIFT = 2  # random translation of +-2 px on the 32x32 input
BACKGROUND = -1.0  # a 0 pixel after (x - 0.5) / 0.5
# Per-architecture defaults: epochs, peak learning rate, AdamW weight decay.
RECIPES: dict[str, dict[str, float]] = {
    "simple_cnn": {"epochs": 15, "lr": 2e-3, "weight_decay": 1e-4},
    "resnet": {"epochs": 12, "lr": 3e-3, "weight_decay": 1e-4},
    "mobilenet_v2": {"epochs": 20, "lr": 4e-3, "weight_decay": 1e-4},
    "vit": {"epochs": 40, "lr": 2e-3, "weight_decay": 0.05},
}


def random_shift(x: torch.Tensor, generator: torch.Generator, shift: int = SHIFT) -> torch.Tensor:
    """Translate each image by an independent integer offset in [-shift, shift] (background fill)."""
    n, _, h, w = x.shape
    padded = F.pad(x, (shift, shift, shift, shift), value=BACKGROUND)
    offsets = torch.randint(0, 2 * shift + 1, (n, 2), generator=generator).tolist()
    return torch.stack([padded[i, :, dy : dy + h, dx : dx + w] for i, (dy, dx) in enumerate(offsets)])


@torch.inference_mode()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    correct = 0
    for start in range(0, len(x), 256):
        correct += int((model(x[start : start + 256]).argmax(1) == y[start : start + 256]).sum())
    return correct / len(x)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train_one(
    arch: str,
    data: dict[str, torch.Tensor],
    epochs: int,
    out: Path,
    seed: int,
) -> dict[str, object]:
    recipe = RECIPES[arch]
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = ARCHITECTURES[arch](num_classes=NUM_CLASSES, in_channels=IN_CHANNELS, image_size=IMAGE_SIZE)
    x_train, y_train = data["x_train"], data["y_train"]
    steps_per_epoch = -(-len(x_train) // BATCH_SIZE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"])
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=recipe["lr"], total_steps=max(1, epochs * steps_per_epoch), pct_start=0.15
    )
    started = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(x_train), generator=generator)
        total_loss = 0.0
        for start in range(0, len(order), BATCH_SIZE):
            idx = order[start : start + BATCH_SIZE]
            xb = random_shift(x_train[idx], generator)
            loss = F.cross_entropy(model(xb), y_train[idx], label_smoothing=0.05)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            total_loss += float(loss.detach()) * len(idx)
        if epoch == epochs - 1 or (epoch + 1) % 5 == 0:
            test_acc = accuracy(model, data["x_test"], data["y_test"])
            print(f"  {arch} epoch {epoch + 1}/{epochs} loss {total_loss / len(x_train):.4f} test {test_acc:.4f}")
    seconds = time.perf_counter() - started
    model.eval()
    path = out / f"{arch}_digits.pth"
    torch.save(model.state_dict(), path)
    return {
        "arch": arch,
        "epochs": epochs,
        "train_accuracy": accuracy(model, x_train, y_train),
        "test_accuracy": accuracy(model, data["x_test"], data["y_test"]),
        "golden_accuracy": accuracy(model, data["x_test"][:GOLDEN_COUNT], data["y_test"][:GOLDEN_COUNT]),
        "seconds": round(seconds, 1),
        "params": sum(p.numel() for p in model.parameters()),
        "file": path.name,
        "bytes": path.stat().st_size,
        "sha256": sha256(path),
        "lr": recipe["lr"],
        "weight_decay": recipe["weight_decay"],
        "seed": seed,
    }


def write_report(out: Path, results: dict[str, dict[str, object]]) -> str:
    lines = [
        "# Bundled checkpoints: accuracy on scikit-learn digits",
        "",
        "Generated by `python -m models.train` (see models/README.md). Data: `sklearn.datasets.load_digits()`,",
        "1797 8x8 handwritten digits (UCI Optical Recognition of Handwritten Digits, CC BY 4.0), upsampled to",
        "32x32 RGB via `export_check.preprocess` with `models.digits.DIGITS_PREPROCESS`; fixed stratified split of",
        f"1437 train / 360 test; the golden set is the first {GOLDEN_COUNT} test digits.",
        f"Software: torch {torch.__version__}, numpy {np.__version__}, Python {platform.python_version()}, "
        f"{torch.get_num_threads()} threads.",
        "",
        "| arch | epochs | train acc | test acc | golden acc | seconds | params | file | bytes | sha256 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for arch in ARCHITECTURES:
        if arch not in results:
            continue
        r = results[arch]
        lines.append(
            f"| {arch} | {r['epochs']} | {100 * r['train_accuracy']:.2f}% | {100 * r['test_accuracy']:.2f}% "
            f"| {100 * r['golden_accuracy']:.2f}% | {r['seconds']} | {r['params']:,} | {r['file']} "
            f"| {r['bytes']:,} | `{r['sha256']}` |"
        )
    text = "\n".join(lines) + "\n"
    (out / "ACCURACY.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="all", choices=["all", *ARCHITECTURES], help="architecture (default all)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: per-architecture recipe)")
    parser.add_argument("--out", type=Path, default=Path("models/checkpoints"), help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        parser.error("--epochs must be >= 1")

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    np.random.seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    images, labels = load_digits_arrays()
    train_idx, test_idx = digits_split(labels)
    x_all = torch.from_numpy(preprocess_digits(images))
    y_all = torch.from_numpy(labels)
    data = {
        "x_train": x_all[train_idx],
        "y_train": y_all[train_idx],
        "x_test": x_all[test_idx],
        "y_test": y_all[test_idx],
    }

    results_path = args.out / "accuracy.json"
    results: dict[str, dict[str, object]] = json.loads(results_path.read_text()) if results_path.exists() else {}
    archs = list(ARCHITECTURES) if args.arch == "all" else [args.arch]
    for arch in archs:
        epochs = args.epochs if args.epochs is not None else int(RECIPES[arch]["epochs"])
        print(f"training {arch} for {epochs} epochs", flush=True)
        results[arch] = train_one(arch, data, epochs, args.out, args.seed)
        r = results[arch]
        print(
            f"{arch}: train {r['train_accuracy']:.4f} test {r['test_accuracy']:.4f} "
            f"({r['seconds']} s, {r['params']:,} params, {r['bytes']:,} bytes)",
            flush=True,
        )
    results_path.write_text(json.dumps({a: results[a] for a in ARCHITECTURES if a in results}, indent=2) + "\n")
    print(write_report(args.out, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
