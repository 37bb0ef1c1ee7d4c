"""Straight-line baseline: export one model six ways, replay the digits through each, compare to eager.

The floor export-check is measured against: bare library calls in one pass, no error handling,
no caching, no subprocesses. Run from the repository root::

    python benchmarks/baseline.py --arch resnet --checkpoint models/checkpoints/resnet_digits.pth --json
    python benchmarks/baseline.py --arch simple_cnn --image-size 224 --images 64   # untrained, seeded

Images: the digits test split in its fixed order (the first 64 are the golden set), then the train
split, i.e. all 1797 digits; N > 1797 cycles through them again. Every stage's wall time is reported.
"""

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repository root: models, exporter.preprocess

import numpy as np
import onnx
import onnxruntime as ort
import onnxsim
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from torch import nn

from models import ARCHITECTURES
from models.digits import DIGITS_PREPROCESS, digits_split, load_digits_arrays, preprocess_digits

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--arch", required=True, choices=sorted(ARCHITECTURES))
parser.add_argument("--checkpoint", type=Path, help="bare state_dict; omitted: untrained weights from --seed")
parser.add_argument("--images", type=int, default=64, help="golden-set size (default 64)")
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--out", type=Path, default=Path("build/baseline"))
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--torch-threads", type=int, default=2)
parser.add_argument("--ort-intra-threads", type=int, default=2)
parser.add_argument("--ort-inter-threads", type=int, default=1)
parser.add_argument("--json", action="store_true", help="print the result as JSON")
args = parser.parse_args()

torch.set_num_threads(args.torch_threads)
out = args.out / f"{args.arch}-{args.image_size}"
out.mkdir(parents=True, exist_ok=True)
times: dict[str, float] = {}
clock = time.perf_counter()


def lap(stage: str) -> None:
    global clock
    now = time.perf_counter()
    times[stage] = round(now - clock, 4)
    clock = now


# Load: model, weights, images.
torch.manual_seed(args.seed)
model = ARCHITECTURES[args.arch](num_classes=10, in_channels=3, image_size=args.image_size)
if args.checkpoint is not None:
    model.load_state_dict(torch.load(args.checkpoint, weights_only=True, map_location="cpu"))
model.eval()
lap("load")
digits, labels = load_digits_arrays()
train_idx, test_idx = digits_split(labels)
order = np.resize(np.concatenate([test_idx, train_idx]), args.images)
spec = dataclasses.replace(DIGITS_PREPROCESS, size=(args.image_size, args.image_size))
x = torch.from_numpy(preprocess_digits(digits[order], spec))
y = labels[order]
lap("preprocess")

batches = list(torch.split(x, args.batch_size))
with torch.inference_mode():
    eager = torch.cat([model(b) for b in batches]).numpy()
lap("eager")

# Export: six artifacts, each written to a file.
example = batches[0]
paths = {
    "torchscript-trace": out / "model.trace.pt",
    "torchscript-script": out / "model.script.pt",
    "onnx": out / "model.onnx",
    "onnx-simplified": out / "model.sim.onnx",
    "torch-int8-dynamic": out / "model.int8.pt",
    "onnx-int8-dynamic": out / "model.int8.onnx",
}
torch.jit.trace(model, example).save(str(paths["torchscript-trace"]))
lap("export/torchscript-trace")
torch.jit.script(model).save(str(paths["torchscript-script"]))
lap("export/torchscript-script")
torch.onnx.export(
    model,
    (example,),
    str(paths["onnx"]),
    dynamo=False,
    opset_version=17,
    input_names=["input"],
    output_names=["logits"],
    dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
)
lap("export/onnx")
simplified, simplify_check = onnxsim.simplify(onnx.load(str(paths["onnx"])))
onnx.save(simplified, str(paths["onnx-simplified"]))
lap("export/onnx-simplified")
quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
torch.jit.trace(quantized, example).save(str(paths["torch-int8-dynamic"]))
lap("export/torch-int8-dynamic")
quantize_dynamic(str(paths["onnx"]), str(paths["onnx-int8-dynamic"]), weight_type=QuantType.QInt8)
lap("export/onnx-int8-dynamic")

# Replay: reload each artifact from its file and run every batch through it.
options = ort.SessionOptions()
options.intra_op_num_threads = args.ort_intra_threads
options.inter_op_num_threads = args.ort_inter_threads
artifacts = {}
for name, path in paths.items():
    if path.suffix == ".pt":
        loaded = torch.jit.load(str(path), map_location="cpu")
        with torch.inference_mode():
            logits = torch.cat([loaded(b) for b in batches]).numpy()
    else:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        logits = np.concatenate([session.run(["logits"], {"input": b.numpy()})[0] for b in batches])
    error = np.abs(logits.astype(np.float64) - eager.astype(np.float64))
    artifacts[name] = {
        "file": str(path),
        "bytes": path.stat().st_size,
        "mae": float(error.mean()),
        "max_abs_err": float(error.max()),
        "top1_agreement": float((logits.argmax(1) == eager.argmax(1)).mean()),
        "accuracy": float((logits.argmax(1) == y).mean()),
    }
    lap(f"replay/{name}")

result = {
    "arch": args.arch,
    "checkpoint": None if args.checkpoint is None else str(args.checkpoint),
    "image_size": args.image_size,
    "images": args.images,
    "batch_size": args.batch_size,
    "threads": {"torch": args.torch_threads, "ort_intra": args.ort_intra_threads, "ort_inter": args.ort_inter_threads},
    "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": ort.__version__,
                 "onnxsim": onnxsim.__version__},
    "eager_accuracy": float((eager.argmax(1) == y).mean()),
    "onnxsim_check": bool(simplify_check),
    "artifacts": artifacts,
    "seconds": times,
    "total_seconds": round(sum(times.values()), 4),
}
if args.json:
    print(json.dumps(result, indent=2))
else:
    print(f"{args.arch} @ {args.image_size}px, {args.images} images, eager accuracy {result['eager_accuracy']:.4f}")
    print(f"{'artifact':<20} {'MAE':>10} {'max abs err':>12} {'top1 agree':>10} {'export s':>9} {'replay s':>9}")
    for name, row in artifacts.items():
        print(f"{name:<20} {row['mae']:>10.3e} {row['max_abs_err']:>12.3e} {row['top1_agreement']:>10.4f} "
              f"{times['export/' + name]:>9.3f} {times['replay/' + name]:>9.3f}")
    print(f"load {times['load']:.3f} s, preprocess {times['preprocess']:.3f} s, eager {times['eager']:.3f} s, "
          f"total {result['total_seconds']:.3f} s")
