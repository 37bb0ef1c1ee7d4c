"""Peak memory of ``export-check golden record`` as the number of inputs grows (issue 24, item 8).

Records the bundled digits model (``models/checkpoints/resnet_digits.pth``) over N images of 224x224
(scikit-learn's bundled 8x8 digits upscaled; no download), preprocessed at ``--size 224``, with the
real CLI in a subprocess, and samples the peak PSS of its whole process tree (``harness.measured``). The target: 2,048 images
within +150 MB of 32 images (the issue measured 763 MB for 2,048 before recording streamed to disk).

    python benchmarks/record_memory.py                 # 32 and 2048 images, one run each
    python benchmarks/record_memory.py --sizes 32 512 --repeats 3
    python benchmarks/record_memory.py --format 2        # the output declared: format 2's path

The images are written by a child process (as in ``benchmarks/run.py``): Linux carries a forked
child's high-water mark across ``exec``, so this process stays small lest its size become every
measured run's floor. Images and golden sets go under ``benchmarks/out/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, measured  # noqa: E402  (the tree's PSS, as every benchmark reports memory)

OUT = REPO / "benchmarks" / "out" / "record-memory"
SIDE = 224
TARGET_MB = 150.0


def images(count: int) -> Path:
    folder = OUT / f"images-{count}"
    if len(list(folder.glob("*.png"))) != count:
        subprocess.run([sys.executable, __file__, "--write-images", str(count), str(folder)], cwd=REPO, check=True)
    return folder


def _write_images(count: int, folder: Path) -> None:
    import numpy as np
    from PIL import Image

    sys.path.insert(0, str(REPO))
    from models.digits import digit_to_image, load_digits_arrays

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    digits, _ = load_digits_arrays()
    for n, index in enumerate(np.resize(np.arange(len(digits)), count)):
        digit_to_image(digits[index]).convert("RGB").resize((SIDE, SIDE), Image.Resampling.BILINEAR).save(folder / f"{n:05d}.png")


def record(count: int, version: int = 1) -> tuple[float, float]:
    """One ``golden record`` of ``count`` images: (seconds, the tree's peak PSS in MB). ``version`` 2: the output
    declared in a settings file, which records format 2 (the path of models of several outputs)."""
    inputs = images(count)
    golden = OUT / f"golden-{count}-v{version}"
    shutil.rmtree(golden, ignore_errors=True)
    cmd = [sys.executable, "-m", "export_check", "golden", "record", str(REPO / "models" / "checkpoints" / "resnet_digits.pth"),
           "--arch", f"{REPO / 'models' / 'resnet.py'}:ResNet", "--inputs", str(inputs), "--golden", str(golden),
           "--size", str(SIDE), "--mode", "RGB", "--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5", "--batch-size", "16"]
    if version == 2:
        settings = OUT / "format2.toml"
        settings.write_text('[outputs.output]\nkind = "logits"\n')
        cmd += ["--config", str(settings)]
    log = OUT / "record.log"
    with open(log, "wb") as sink:
        code, seconds, _, peak = measured(cmd, stderr=sink)
    if code != 0:
        raise SystemExit(f"golden record of {count} images failed: {log.read_text().strip()[-2000:]}")
    recorded = json.loads((golden / "manifest.json").read_text())
    assert len(recorded["inputs"]) == count and recorded["version"] == version, (len(recorded["inputs"]), recorded["version"])
    return seconds, peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 2048])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--format", type=int, choices=(1, 2), default=1, help="the golden format to record (default: 1)")
    parser.add_argument("--write-images", nargs=2, metavar=("COUNT", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_images:
        _write_images(int(args.write_images[0]), Path(args.write_images[1]))
        return 0
    peaks: dict[int, float] = {}
    for count in args.sizes:
        runs = [record(count, args.format) for _ in range(args.repeats)]
        peaks[count] = statistics.median(mb for _, mb in runs)
        seconds = statistics.median(s for s, _ in runs)
        print(f"{count:>6} images of {SIDE}x{SIDE}, format {args.format}: peak PSS (tree) {peaks[count]:.0f} MB, {seconds:.1f} s", flush=True)
    small, large = min(peaks), max(peaks)
    growth = peaks[large] - peaks[small]
    verdict = "within" if growth <= TARGET_MB else "OVER"
    print(f"{large} images cost {growth:+.0f} MB over {small}: {verdict} the +{TARGET_MB:.0f} MB target")
    return 0 if growth <= TARGET_MB else 1


if __name__ == "__main__":
    sys.exit(main())
