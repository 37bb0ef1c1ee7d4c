"""Straight-line baseline: export one model the chosen ways (``--kinds``), replay a golden set through each, compare.

The floor export-check is measured against: the same work with bare library calls in one pass, no
error handling, no hashing, no caching. "The same work" means the same as ``export-check --no-cache``
with its defaults: the golden set read from its directory (PNG decode + the recorded preprocessing),
batch size 16, one torch thread and one inter-op thread, onnxruntime with one intra-op and one
inter-op thread, sequential execution and every graph optimisation, ``torch.jit.trace`` on the first
golden batch without its re-run check, the TorchScript ONNX exporter at opset 17 with a dynamic batch
axis, onnxsim, dynamic int8 in torch and in onnxruntime, torch.export, the fp16 ONNX file (the default
group; ``--kinds modern,aoti,openvino`` or ``all`` adds the others in the same bare calls); every artifact saved, reloaded from its file
and run on every batch; MAE against the eager outputs, and eager against the golden reference.
Run from the repository root::

    python benchmarks/baseline.py --arch resnet --checkpoint models/checkpoints/resnet_digits.pth \\
        --golden golden --json

Every stage's wall time is reported (``seconds``); ``--json`` prints one JSON object.
"""

import argparse
import io
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repository root: models, export_check.golden.inputs

import numpy as np
import onnx
import onnxruntime as ort
import onnxsim
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from PIL import Image
from torch import nn

from export_check.artifacts import BUILD_ORDER, resolve_kinds
from export_check.golden.inputs import Preprocess, preprocess_image
from models import ARCHITECTURES

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--arch", required=True, choices=sorted(ARCHITECTURES))
parser.add_argument("--checkpoint", type=Path, required=True, help="bare state_dict of the architecture")
parser.add_argument("--golden", type=Path, default=Path("golden"), help="golden set directory (default: golden)")
parser.add_argument("--image-size", type=int, default=32, help="the architecture's input size (default 32)")
parser.add_argument("--batch-size", type=int, default=16, help="inputs per batch (default 16, as export-check)")
parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime intra-op threads (default 1, as export-check)")
parser.add_argument("--opset", type=int, default=17)
parser.add_argument("--out", type=Path, default=Path("build/baseline"))
parser.add_argument("--json", action="store_true", help="print the result as JSON")
parser.add_argument("--kinds", default="default", help="kinds or groups, as export-check --artifacts takes them (default: default)")
args = parser.parse_args()
BUILD_ORDER_NAMES = [k.name for k in BUILD_ORDER]

torch.set_num_threads(args.threads)
torch.set_num_interop_threads(1)
out = args.out / args.arch
out.mkdir(parents=True, exist_ok=True)
times: dict[str, float] = {}
clock = time.perf_counter()


def lap(stage: str) -> None:
    global clock
    now = time.perf_counter()
    times[stage] = round(now - clock, 4)
    clock = now


# Load: model and weights, the golden set (decoded images, labels, reference logits).
model = ARCHITECTURES[args.arch](num_classes=10, in_channels=3, image_size=args.image_size)
model.load_state_dict(torch.load(args.checkpoint, weights_only=True, map_location="cpu"))
model.eval()
lap("load")
manifest = json.loads((args.golden / "manifest.json").read_text())
spec = Preprocess.from_json(manifest["preprocess"])
labels = np.array([item["label"] for item in manifest["inputs"]])
reference = np.load(args.golden / manifest["reference"]["file"])


def decode(item: dict) -> np.ndarray:
    with Image.open(io.BytesIO((args.golden / item["file"]).read_bytes())) as img:
        img.load()
        return preprocess_image(img, spec)


x = torch.from_numpy(np.stack([decode(item) for item in manifest["inputs"]]))
batches = list(torch.split(x, args.batch_size))
lap("golden")

with torch.inference_mode():
    eager = torch.cat([model(b) for b in batches]).numpy()
eager_mae = float(np.abs(eager.astype(np.float64) - reference).mean())
lap("eager")

# Export: every chosen artifact, each written to a file (the bare calls of each kind's module).
example = batches[0]
suffixes = {"torchscript-trace": ".trace.pt", "torchscript-script": ".script.pt", "onnx": ".onnx", "onnx-simplified": ".sim.onnx",
            "torch-int8-dynamic": ".int8.pt", "onnx-int8-dynamic": ".int8.onnx", "torch-export": ".pt2", "onnx-dynamo": ".dynamo.onnx",
            "onnx-fp16": ".fp16.onnx", "torchao-int8-dynamic": ".torchao.pt2", "aoti": ".aoti.pt2", "openvino": ".ov.xml",
            "openvino-f32": ".ov32.xml", "onnx-int8-static": ".qdq.onnx", "pt2e-int8-static": ".pt2e.pt2",
            "onnx-dynamo-simplified": ".dynamo.sim.onnx", "onnx-dynamo-int8-dynamic": ".dynamo.int8.onnx",
            "onnx-dynamo-int8-static": ".dynamo.qdq.onnx", "executorch": ".et.pte", "executorch-int8": ".et8.pte"}
# The calibration split, as export-check reads it: the manifest's, or half the set (at most 32) by content sha256.
split = (manifest.get("recording") or {}).get("calibration") or {"rule": "sha256", "count": min(32, len(manifest["inputs"]) // 2)}
if split["rule"] == "names":
    calibration = [i for i, item in enumerate(manifest["inputs"]) if item.get("name", item["file"]) in set(split["names"])]
elif split["rule"] == "first":
    calibration = list(range(split["count"]))
else:
    calibration = sorted(sorted(range(len(manifest["inputs"])), key=lambda i: (manifest["inputs"][i]["sha256"], i))[: split["count"]])
judged = np.array([i not in set(calibration) for i in range(len(manifest["inputs"]))])
calibration_x = x[calibration]
chosen = resolve_kinds([k.strip() for k in args.kinds.split(",") if k.strip()])
# the ONNX file the derived ONNX kinds start from is built when any of them is chosen, as export-check does
needed = [k for k in BUILD_ORDER_NAMES if k in chosen
          or (k == "onnx" and {"onnx-simplified", "onnx-int8-dynamic", "onnx-fp16", "onnx-int8-static"} & set(chosen))
          or (k == "onnx-dynamo" and {"onnx-dynamo-simplified", "onnx-dynamo-int8-dynamic", "onnx-dynamo-int8-static"} & set(chosen))]
paths = {name: out / f"model{suffixes[name]}" for name in needed}
batch = torch.export.Dim.DYNAMIC


def export_program(m: nn.Module):  # batch axis dynamic, from the 16-sample first batch
    return torch.export.export(m, (example,), dynamic_shapes=({0: batch},), strict=False)


def build(name: str, path: Path) -> None:
    if name == "torchscript-trace":
        with torch.no_grad():
            torch.jit.trace(model, example, check_trace=False).save(str(path))
    elif name == "torchscript-script":
        torch.jit.script(model).save(str(path))
    elif name == "onnx":
        torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=args.opset, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    elif name in ("onnx-simplified", "onnx-dynamo-simplified"):
        simplified, ok = onnxsim.simplify(onnx.load(str(paths[name.removesuffix("-simplified")])))
        onnx.save(simplified, str(path))
    elif name == "torch-int8-dynamic":
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
        with torch.no_grad():
            torch.jit.trace(quantized, example, check_trace=False).save(str(path))
    elif name in ("onnx-int8-dynamic", "onnx-dynamo-int8-dynamic"):
        quantize_dynamic(str(paths[name.removesuffix("-int8-dynamic")]), str(path), weight_type=QuantType.QInt8)
    elif name in ("onnx-int8-static", "onnx-dynamo-int8-static"):
        from onnxruntime.quantization import QuantFormat, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

        pre = path.with_suffix(".pre.onnx")
        quant_pre_process(str(paths[name.removesuffix("-int8-static")]), str(pre), skip_symbolic_shape=True)

        class Reader:
            def __init__(self) -> None:
                self.batches = iter([{"input": calibration_x.numpy()}])

            def get_next(self):
                return next(self.batches, None)

        quantize_static(str(pre), str(path), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, per_channel=True)
    elif name == "pt2e-int8-static":
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
            X86InductorQuantizer,
            get_default_x86_inductor_quantization_config,
        )

        prepared = prepare_pt2e(export_program(model).module(), X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config()))
        with torch.no_grad():
            prepared(calibration_x)
        torch.export.save(export_program(convert_pt2e(prepared)), str(path))
    elif name == "torch-export":
        torch.export.save(export_program(model), str(path))
    elif name == "onnx-dynamo":
        torch.onnx.export(model, (example,), dynamo=True, opset_version=max(args.opset, 18), input_names=["input"], output_names=["logits"],
                          dynamic_shapes=({0: batch},)).save(str(path), external_data=False)
    elif name == "onnx-fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        onnx.save(convert_float_to_float16(onnx.load(str(paths["onnx"])), keep_io_types=True), str(path))
    elif name == "torchao-int8-dynamic":
        import copy

        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        quantized = copy.deepcopy(model)
        quantize_(quantized, Int8DynamicActivationInt8WeightConfig())
        torch.export.save(export_program(quantized), str(path))
    elif name == "aoti":
        torch._inductor.aoti_compile_and_package(export_program(model), package_path=str(path))
    elif name in ("openvino", "openvino-f32"):
        import openvino as ov

        ov.save_model(ov.convert_model(model, example_input=example), str(path), compress_to_fp16=name == "openvino")
    elif name in ("executorch", "executorch-int8"):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        source = model
        if name == "executorch-int8":
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

            quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
            prepared = prepare_pt2e(export_program(model).module(), quantizer)
            with torch.no_grad():
                prepared(calibration_x)
            source = convert_pt2e(prepared)
        # the batch bounded as export-check bounds it (max 64): ExecuTorch plans memory for the bound
        bounded = torch.export.export(source, (example,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},), strict=False)
        path.write_bytes(to_edge_transform_and_lower(bounded, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    else:
        raise SystemExit(f"no baseline for {name}")


for name, path in paths.items():
    build(name, path)
    lap(f"export/{name}")


def load(name: str, path: Path):  # a callable from numpy batch to numpy logits, reloaded from the file
    if path.suffix == ".pt":
        loaded = torch.jit.load(str(path), map_location="cpu")
    elif name in ("torch-export", "torchao-int8-dynamic", "pt2e-int8-static"):
        if name != "torch-export":
            import torchao  # noqa: F401  (registers its ops)
        loaded = torch.export.load(str(path)).module()
    elif name == "aoti":
        loaded = torch._inductor.aoti_load_package(str(path))
    elif path.suffix == ".xml":
        import openvino as ov

        config = {"INFERENCE_NUM_THREADS": args.threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
        if name == "openvino-f32":
            config["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = ov.Core().compile_model(str(path), "CPU", config)
        return lambda b: compiled([b.numpy()])[compiled.outputs[0]]
    elif path.suffix == ".pte":
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
        from executorch.runtime import Runtime

        _unsafe_reset_threadpool(args.threads)  # XNNPACK's threadpool, as export-check pins it
        method = Runtime.get().load_program(path).load_method("forward")
        return lambda b: method.execute([b.contiguous()])[0].numpy()  # contiguous: the dim order it was exported with
    else:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return lambda b: session.run(["logits"], {"input": b.numpy()})[0]

    def run(b: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():
            return loaded(b).numpy()

    return run


# Replay: reload each artifact from its file and run every batch through it.
options = ort.SessionOptions()
options.intra_op_num_threads = args.threads
options.inter_op_num_threads = 1
options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
artifacts = {}
for name, path in paths.items():
    if name not in chosen:
        continue
    run = load(name, path)
    logits = np.concatenate([run(b) for b in batches])
    mine, truth = logits, eager
    if name.endswith("-int8-static") or name == "executorch-int8":  # judged on the samples it was not calibrated on
        mine, truth = logits[judged], eager[judged]
    error = np.abs(mine.astype(np.float64) - truth.astype(np.float64))
    artifacts[name] = {
        "file": str(path),
        "bytes": path.stat().st_size + (path.with_suffix(".bin").stat().st_size if path.suffix == ".xml" else 0),
        "mae": float(error.mean()),
        "max_abs_err": float(error.max()),
        "relative_mae": float(error.mean() / np.abs(truth.astype(np.float64)).mean()),
        "top1_agreement": float((mine.argmax(1) == truth.argmax(1)).mean()),
        "accuracy": float((logits.argmax(1) == labels).mean()),
        "judged": len(mine),
    }
    lap(f"replay/{name}")

result = {
    "arch": args.arch,
    "checkpoint": str(args.checkpoint),
    "golden": str(args.golden),
    "images": len(labels),
    "batch_size": args.batch_size,
    "threads": {"torch": torch.get_num_threads(), "torch_interop": torch.get_num_interop_threads(),
                "ort_intra": args.threads, "ort_inter": 1},
    "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": ort.__version__,
                 "onnxsim": onnxsim.__version__},
    "eager_accuracy": float((eager.argmax(1) == labels).mean()),
    "eager_vs_reference_mae": eager_mae,
    "kinds": list(chosen),
    "artifacts": artifacts,
    "seconds": times,
    "total_seconds": round(sum(times.values()), 4),
}
if args.json:
    print(json.dumps(result, indent=2))
else:
    print(f"{args.arch}: {len(labels)} images, eager accuracy {result['eager_accuracy']:.4f}, "
          f"eager vs reference MAE {eager_mae:.3e}")
    print(f"{'artifact':<20} {'MAE':>10} {'max abs err':>12} {'top1 agree':>10} {'export s':>9} {'replay s':>9}")
    for name, row in artifacts.items():
        print(f"{name:<20} {row['mae']:>10.3e} {row['max_abs_err']:>12.3e} {row['top1_agreement']:>10.4f} "
              f"{times['export/' + name]:>9.3f} {times['replay/' + name]:>9.3f}")
    print(f"load {times['load']:.3f} s, golden {times['golden']:.3f} s, eager {times['eager']:.3f} s, "
          f"total {result['total_seconds']:.3f} s")
