"""How far OpenVINO's deployed precision moves the bundled digit models, on both kinds of CPU, from one machine.

The `openvino` kind ships save_model's fp16-compressed weights and compiles at the runtime's default
inference precision: bf16 on a CPU with avx512_bf16 or AMX, f32 on one without (an AVX2 CPU). This
script measures both on any machine, since the precision is a compile option:

- ``bf16``: fp16 weights, INFERENCE_PRECISION_HINT=bf16 (what an avx512_bf16/AMX CPU runs by default);
  skipped, and said so, on a CPU that has no bf16 path;
- ``fp16-weights``: fp16 weights, INFERENCE_PRECISION_HINT=f32 (what an AVX2 CPU runs by default);
- ``f32``: f32 weights and precision (the `openvino-f32` kind).

Against eager on the 360 held-out test digits it prints, per model and precision, the relative MAE
(MAE over the mean |eager logit|) and the top-1 agreement with eager. The gate families the `openvino`
row is judged by (gates.GATE_FAMILIES: fp16, bf16) are chosen from these figures (README, "What varies
by CPU").

    python benchmarks/openvino_precision.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from models import ARCHITECTURES  # noqa: E402
from models.digits import digits_split, load_digits_arrays, preprocess_digits  # noqa: E402

CHECKPOINTS = {"simple_cnn": "simple_cnn_digits.pth", "resnet": "resnet_digits.pth", "mobilenet_v2": "mobilenet_v2_digits.pth",
               "vit": "vit_digits.pth"}


def main() -> None:
    import openvino as ov

    images, labels = load_digits_arrays()
    _, test = digits_split(labels)
    inputs = preprocess_digits(images[test])
    core = ov.Core()
    bf16 = "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    print(f"openvino {ov.__version__}; CPU capabilities: {' '.join(core.get_property('CPU', 'OPTIMIZATION_CAPABILITIES'))}")
    print(f"{'model':<14} {'precision':<14} {'relMAE':>9} {'max|err|/mean':>14} {'top-1 agree':>12}")
    torch.set_num_threads(1)
    for name, file in CHECKPOINTS.items():
        model = ARCHITECTURES[name](num_classes=10, in_channels=3, image_size=32)
        model.load_state_dict(torch.load(REPO / "models" / "checkpoints" / file, weights_only=True))
        model.eval()
        with torch.inference_mode():
            eager = model(torch.from_numpy(inputs)).numpy()
        scale = float(np.abs(eager).mean())
        converted = ov.convert_model(model, example_input=torch.from_numpy(inputs[:4]))
        with tempfile.TemporaryDirectory() as folder:
            for precision, compress, hint in (("bf16", True, "bf16"), ("fp16-weights", True, "f32"), ("f32", False, "f32")):
                if precision == "bf16" and not bf16:
                    print(f"{name:<14} {precision:<14} {'(this CPU has no bf16 path)':>37}")
                    continue
                xml = Path(folder) / f"{precision}.xml"
                ov.save_model(converted, str(xml), compress_to_fp16=compress)
                compiled = core.compile_model(core.read_model(str(xml)), "CPU",
                                              {"INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1})
                got = np.concatenate([np.asarray(compiled([inputs[i:i + 64]])[compiled.outputs[0]]) for i in range(0, len(inputs), 64)])
                err = np.abs(got - eager)
                agree = float((got.argmax(1) == eager.argmax(1)).mean())
                print(f"{name:<14} {precision:<14} {err.mean() / scale:>9.3%} {err.max() / scale:>14.3%} {agree:>12.2%}")


if __name__ == "__main__":
    main()
