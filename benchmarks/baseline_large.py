"""Straight-line baseline for the real-size models (benchmarks/large_models.py): the same work as
``export-check --no-cache`` with its defaults, in bare library calls, as benchmarks/baseline.py does for
the digit models, for any architecture spec and for ``.npy`` token inputs (a dynamic sequence axis).

The six default kinds: ``torch.jit.trace`` on the first golden batch, ``torch.jit.script``, the
TorchScript ONNX exporter at opset 17 (dynamic batch axis, and the sequence axis of token inputs),
onnxsim, dynamic int8 in torch and in onnxruntime; every file saved, reloaded and run on every batch;
MAE against eager. Batch size 16, one torch thread, onnxruntime one intra-op and one inter-op thread,
sequential, every graph optimisation. ``--json`` prints one JSON object with every stage's seconds.
"""

import argparse
import importlib.util
import io
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import onnx
import onnxruntime as ort
import onnxsim
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from PIL import Image
from torch import nn

from export_check.golden.inputs import Preprocess, preprocess_image

KINDS = ("torchscript-trace", "torchscript-script", "onnx", "onnx-simplified", "torch-int8-dynamic", "onnx-int8-dynamic")
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--arch", required=True, help="path/to/file.py:Factory")
parser.add_argument("--arch-kwargs", default="{}")
parser.add_argument("--checkpoint", type=Path, required=True)
parser.add_argument("--golden", type=Path, required=True)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--out", type=Path, default=Path("build/baseline-large"))
parser.add_argument("--json", action="store_true")
parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, from the six default kinds (default: all six)")
args = parser.parse_args()
SELECTED = [k.strip() for k in args.kinds.split(",") if k.strip()]
if not SELECTED or any(k not in KINDS for k in SELECTED):
    parser.error(f"--kinds from {', '.join(KINDS)}")
if "onnx" not in SELECTED and any(k in SELECTED for k in ("onnx-simplified", "onnx-int8-dynamic")):
    SELECTED.insert(0, "onnx")  # their source file
torch.set_num_threads(1)
torch.set_num_interop_threads(1)
args.out.mkdir(parents=True, exist_ok=True)
times: dict[str, float] = {}
clock = time.perf_counter()


def lap(stage: str) -> None:
    global clock
    now = time.perf_counter()
    times[stage] = round(now - clock, 4)
    clock = now


file, factory = args.arch.rsplit(":", 1)
spec = importlib.util.spec_from_file_location("bench_arch", file)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
model = getattr(module, factory)(**json.loads(args.arch_kwargs))
model.load_state_dict(torch.load(args.checkpoint, weights_only=True, map_location="cpu"))
model.eval()
lap("load")
manifest = json.loads((args.golden / "manifest.json").read_text())


def decode(item: dict) -> np.ndarray:
    data = (args.golden / item["file"]).read_bytes()
    if item["file"].endswith(".npz"):  # a format-2 sample: one named array (the token ids)
        with np.load(io.BytesIO(data), allow_pickle=False) as sample:
            return sample[sample.files[0]]
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        return preprocess_image(img, Preprocess.from_json(manifest["preprocess"]))


x = torch.from_numpy(np.stack([decode(item) for item in manifest["inputs"]]))
tokens = not x.is_floating_point()
batches = list(torch.split(x, args.batch_size))
lap("golden")
with torch.inference_mode():
    eager = torch.cat([model(b) for b in batches]).numpy()
lap("eager")

example = batches[0]
LIMIT = (2 << 30) - (64 << 20)  # protobuf's 2 GiB, less room for the graph: larger weights go to external data
EXTERNAL = sum(p.numel() * p.element_size() for p in model.state_dict().values()) > LIMIT
paths = {name: args.out / f"model.{name}{'.onnx' if 'onnx' in name else '.pt'}" for name in KINDS}
axes = {0: "batch", 1: "sequence"} if tokens else {0: "batch"}
in_name, out_name = ("tokens", "output") if tokens else ("input", "logits")  # export-check's names for them
for name in [k for k in KINDS if k in SELECTED]:
    path = paths[name]
    if name == "torchscript-trace":
        with torch.no_grad():
            torch.jit.trace(model, example, check_trace=False).save(str(path))
    elif name == "torchscript-script":
        torch.jit.script(model).save(str(path))
    elif name == "onnx":
        torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=17, input_names=[in_name],
                          output_names=[out_name], dynamic_axes={in_name: axes, out_name: {0: "batch"}})
    elif name == "onnx-simplified":
        if EXTERNAL:  # past 2 GiB: path in, path out, the weights in one file beside it (as export-check does)
            onnxsim.simplify(str(paths["onnx"]), output_path=str(path), external_data_threshold=f"{LIMIT}B")
        else:
            onnx.save(onnxsim.simplify(onnx.load(str(paths["onnx"])))[0], str(path))
    elif name == "torch-int8-dynamic":
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
        with torch.no_grad():
            torch.jit.trace(quantized, example, check_trace=False).save(str(path))
    elif name == "onnx-int8-dynamic":
        quantize_dynamic(str(paths["onnx"]), str(path), weight_type=QuantType.QInt8, use_external_data_format=EXTERNAL)
    lap(f"export/{name}")

options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.inter_op_num_threads = 1
options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
artifacts = {}
cpu_times: dict[str, dict[str, float]] = {}  # per replay: this thread's CPU seconds and minor page faults
for name in [k for k in KINDS if k in SELECTED]:
    path = paths[name]
    if path.suffix == ".pt":
        loaded = torch.jit.load(str(path), map_location="cpu")

        def run(b, loaded=loaded):
            with torch.inference_mode():
                return loaded(b).numpy()
    else:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

        def run(b, session=session):
            return session.run([out_name], {in_name: b.numpy()})[0]
    cpu, faults = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    logits = np.concatenate([run(b) for b in batches])
    cpu_times[name] = {"cpu_seconds": round(time.thread_time() - cpu, 4),
                       "minor_faults": resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults}
    error = np.abs(logits.astype(np.float64) - eager.astype(np.float64))
    artifacts[name] = {"mae": float(error.mean()), "top1_agreement": float((logits.argmax(1) == eager.argmax(1)).mean())}
    lap(f"replay/{name}")

result = {"arch": args.arch, "images": len(x), "artifacts": artifacts, "seconds": times, "replay_cpu": cpu_times,
          "total_seconds": round(sum(times.values()), 4)}
print(json.dumps(result, indent=2) if args.json else result)
