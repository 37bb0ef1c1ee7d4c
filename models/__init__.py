"""Bundled reference architectures for export-check (plain PyTorch, no torchvision).

Every class takes ``num_classes``, ``in_channels`` and ``image_size`` and is written to survive
``torch.jit.trace``, ``torch.jit.script``, the legacy ONNX exporter with a dynamic batch axis,
``onnxsim``, and dynamic int8 quantization in both PyTorch and onnxruntime. See README.md.
"""

from .mobilenet import MobileNetV2
from .resnet import ResNet
from .simple_cnn import SimpleCNN
from .vit import VisionTransformer

ARCHITECTURES = {
    "simple_cnn": SimpleCNN,
    "resnet": ResNet,
    "mobilenet_v2": MobileNetV2,
    "vit": VisionTransformer,
}

__all__ = ["ARCHITECTURES", "MobileNetV2", "ResNet", "SimpleCNN", "VisionTransformer"]
