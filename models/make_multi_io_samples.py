"""Write golden samples for the multi-input/output models as one ``.npz`` per sample plus label files.

Run from the repository root::

    python -m models.make_multi_io_samples OUT_DIR --model token_classifier [--count 32]

Each ``.npz`` holds every named input of the model's ``forward`` WITHOUT the batch axis:

* ``digit_detector`` / ``digit_detector_dict``: ``x (1, 32, 32)`` float32;
* ``sequence_recognizer``: ``image (1, 16, W)`` float32, W = 48, 64, 80 changing every 4 samples;
* ``token_classifier``: ``input_ids (L,)``, ``attention_mask (L,)`` int64, L = 64, 48, 56, 40 changing
  every 4 samples; the 4th sample of each group with L >= 48 ends in 8 padding tokens (mask 0);
* ``two_input_net``: ``image (1, 8, 8)``, ``meta (4,)`` float32.

The samples are the first ``count`` items of the held-out sets the metrics in
``checkpoints/multi_io_accuracy.json`` are measured on (test digits only, ``models.multi_io_data.heldout``).
``labels.json`` maps file name -> class label (not for the recogniser); the detector also gets
``boxes.json`` (file name -> normalised x0, y0, x1, y1) and the recogniser ``sequences.json``
(file name -> digit string). Each file is read back and checked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file path: put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.digits import TEST_SIZE  # noqa: E402
from models.multi_io_data import heldout  # noqa: E402

MODELS = {  # --model -> held-out set (the dict detector takes the detector's inputs)
    "digit_detector": "digit_detector",
    "digit_detector_dict": "digit_detector",
    "sequence_recognizer": "sequence_recognizer",
    "token_classifier": "token_classifier",
    "two_input_net": "two_input_net",
}
DEFAULT_COUNT = 32


def write_samples(out: Path, model: str, count: int = DEFAULT_COUNT) -> dict[str, object]:
    """Write ``count`` samples for ``model`` into ``out``; returns file name -> target."""
    out.mkdir(parents=True, exist_ok=True)
    targets: dict[str, object] = {}
    for position, (inputs, target) in enumerate(heldout(MODELS[model], count)):
        if model == "sequence_recognizer":
            name = f"{position:04d}_seq{''.join(map(str, target))}.npz"
        else:
            name = f"{position:04d}_label{target[0] if model.startswith('digit_detector') else target}.npz"
        np.savez(out / name, **inputs)
        with np.load(out / name) as back:
            if sorted(back.files) != sorted(inputs) or any(not np.array_equal(back[k], v) or back[k].dtype != v.dtype for k, v in inputs.items()):
                raise RuntimeError(f"{out / name}: npz round trip changed the inputs")
        targets[name] = target
    if model == "sequence_recognizer":
        files = {"sequences.json": {name: "".join(map(str, t)) for name, t in targets.items()}}
    elif model.startswith("digit_detector"):
        files = {
            "labels.json": {name: t[0] for name, t in targets.items()},
            "boxes.json": {name: [round(float(v), 6) for v in t[1]] for name, t in targets.items()},
        }
    else:
        files = {"labels.json": targets}
    for file, mapping in files.items():
        (out / file).write_text(json.dumps(mapping, indent=2) + "\n")
    return targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output directory")
    parser.add_argument("--model", required=True, choices=list(MODELS), help="which model's inputs")
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT, help=f"number of samples (default {DEFAULT_COUNT})")
    args = parser.parse_args(argv)
    limit = None if args.model == "sequence_recognizer" else TEST_SIZE
    if args.count < 1 or (limit is not None and args.count > limit):
        parser.error(f"--count must be in 1..{limit}" if limit else "--count must be >= 1")
    targets = write_samples(args.out, args.model, args.count)
    shapes: dict[str, int] = {}
    for name in targets:
        with np.load(args.out / name) as data:
            key = ", ".join(f"{k} {data[k].shape} {data[k].dtype}" for k in data.files)
        shapes[key] = shapes.get(key, 0) + 1
    print(f"wrote {len(targets)} {args.model} samples to {args.out}:")
    for key, n in shapes.items():
        print(f"  {n:4d} x {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
