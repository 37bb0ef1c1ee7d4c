"""Write the golden digits as PNG files plus ``labels.json``.

Run from the repository root::

    python -m models.make_golden_images [OUT_DIR] [--count 64]

Writes ``0000_label3.png``-style files (zero-padded position in the golden set, true label),
the 8-bit grayscale 8x8 images from :func:`models.digits.digit_to_image`, and ``labels.json``
mapping file name -> label. Each file is read back and checked to preprocess exactly like the
in-memory image used for training.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file path: put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from export_check.golden.inputs import preprocess_file, preprocess_image  # noqa: E402
from models.digits import (  # noqa: E402
    DIGITS_PREPROCESS,
    GOLDEN_COUNT,
    TEST_SIZE,
    digit_to_image,
    golden_indices,
    load_digits_arrays,
)


def write_golden_images(out: Path, count: int = GOLDEN_COUNT) -> dict[str, int]:
    images, labels = load_digits_arrays()
    out.mkdir(parents=True, exist_ok=True)
    mapping: dict[str, int] = {}
    for position, index in enumerate(golden_indices(count)):
        label = int(labels[index])
        name = f"{position:04d}_label{label}.png"
        img = digit_to_image(images[index])
        img.save(out / name, format="PNG")
        if not np.array_equal(preprocess_file(out / name, DIGITS_PREPROCESS), preprocess_image(img, DIGITS_PREPROCESS)):
            raise RuntimeError(f"{out / name}: PNG round trip changed the preprocessed input")
        mapping[name] = label
    (out / "labels.json").write_text(json.dumps(mapping, indent=2) + "\n")
    return mapping


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path("build/golden-images"), help="output directory")
    parser.add_argument("--count", type=int, default=GOLDEN_COUNT, help=f"number of digits, 1..{TEST_SIZE}")
    args = parser.parse_args(argv)
    if not 0 < args.count <= TEST_SIZE:
        parser.error(f"--count must be in 1..{TEST_SIZE}")
    mapping = write_golden_images(args.out, args.count)
    print(f"wrote {len(mapping)} golden images and labels.json to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
