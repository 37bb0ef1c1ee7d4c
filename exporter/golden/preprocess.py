"""The :class:`Preprocess` spec: how an image file becomes the model's input, as data.

The same spec turns an image file into the model's input when a golden set is recorded, when it is
replayed and when the bundled models are trained, so all three agree (the conversion itself is
:func:`export_check.golden.inputs.preprocess_image`). It is recorded in the manifest
(:meth:`Preprocess.to_json`, read back and validated by :meth:`Preprocess.from_json`);
:func:`preprocess_from_args` builds it from the command line over ``[tool.export-check.preprocess]``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import UsageError

_MODES = {"RGB": 3, "L": 1}
_INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
# Memory bounds (docs/explanation/trust-model.md): a preprocessed input is at most MAX_SIDE on a side and
# MAX_PIXELS in all (2048² RGB float32 is 48 MiB); the decoded image's own bound is inputs.MAX_IMAGE_PIXELS.
MAX_SIDE = 4096
MAX_PIXELS = 2048 * 2048
MIN_STD = 1e-6


@dataclass(frozen=True)
class Preprocess:
    """How an image file becomes a ``float32`` ``C×H×W`` array.

    ``resize`` scales the shorter side to that many pixels before a center crop to ``size``;
    ``None`` resizes straight to ``size``. Pixels are scaled to [0, 1], then ``(x - mean) / std``.
    """

    size: tuple[int, int]
    mode: str = "RGB"
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    resize: int | None = None
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {sorted(_MODES)}, got {self.mode!r}")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {_INTERPOLATIONS}, got {self.interpolation!r}")
        if len(self.size) != 2 or any(int(s) != s or not 1 <= s <= MAX_SIDE for s in self.size):
            raise ValueError(f"size must be two integers in 1..{MAX_SIDE}, got {self.size!r}")
        if self.size[0] * self.size[1] > MAX_PIXELS:
            raise ValueError(f"size {self.size[0]}x{self.size[1]} is over {MAX_PIXELS:,} pixels (2048x2048), more than a golden "
                             "input needs; pick a smaller size")
        channels = _MODES[self.mode]
        if len(self.mean) != channels or len(self.std) != channels:
            raise ValueError(f"mode {self.mode} needs {channels} mean and std values")
        if any(not math.isfinite(m) for m in self.mean):
            raise ValueError("mean values must be finite numbers")
        # float32 division: a smaller std would turn pixels into Inf
        if any(not (MIN_STD <= s < math.inf) for s in self.std):
            raise ValueError(f"std values must be finite and at least {MIN_STD:g}")
        if self.resize is not None and (int(self.resize) != self.resize or not min(self.size) <= self.resize <= MAX_SIDE):
            raise ValueError(f"resize must be an integer from the crop size {min(self.size)} to {MAX_SIDE}")

    @property
    def channels(self) -> int:
        return _MODES[self.mode]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Preprocess:
        """Build from the manifest's ``preprocess`` object; raises ``ValueError`` when malformed."""
        if not isinstance(data, dict):
            raise ValueError("preprocess must be an object")
        known = {"size", "mode", "mean", "std", "resize", "interpolation"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown preprocess keys {sorted(unknown)}")
        if "size" not in data:
            raise ValueError("preprocess needs 'size'")
        try:
            size = tuple(int(v) if isinstance(v, int) and not isinstance(v, bool) else _bad(v) for v in data["size"])
            kwargs: dict[str, Any] = {"size": size}
            for key in ("mean", "std"):
                if key in data:
                    kwargs[key] = tuple(_number(v) for v in data[key])
            if "mode" in data:
                kwargs["mode"] = str(data["mode"]) if isinstance(data["mode"], str) else _bad(data["mode"])
            if "interpolation" in data:
                value = data["interpolation"]
                kwargs["interpolation"] = value if isinstance(value, str) else _bad(value)
            if data.get("resize") is not None:
                value = data["resize"]
                kwargs["resize"] = value if isinstance(value, int) and not isinstance(value, bool) else _bad(value)
        except TypeError as exc:
            raise ValueError(f"malformed preprocess: {exc}") from None
        return cls(**kwargs)


def _bad(value: Any) -> Any:
    raise ValueError(f"unexpected value {value!r}")


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return float(value)


# --- preprocessing from the command line -----------------------------------------------------


def _floats(text: str | None, name: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--{name} takes comma-separated numbers, got {text!r}") from None


def _size(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    parts = text.lower().split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--size takes N or HxW, got {text!r}") from None
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise UsageError(f"--size takes N or HxW, got {text!r}")
    return values[0], values[1]


def preprocess_from_args(
    size: str | None, resize: int | None, mode: str | None, mean: str | None, std: str | None, configured: dict[str, Any] | None
) -> Preprocess | None:
    """Command-line flags over ``[tool.export-check.preprocess]``; ``None`` when nothing says how (tensors only)."""
    data: dict[str, Any] = dict(configured or {})
    if size is not None:
        data["size"] = list(_size(size) or ())
    for key, value in (("resize", resize), ("mode", mode), ("mean", _floats(mean, "mean")), ("std", _floats(std, "std"))):
        if value is not None:
            data[key] = list(value) if isinstance(value, tuple) else value
    if not data:
        return None
    if "mode" in data and "mean" not in data and data["mode"] == "L":
        data.setdefault("mean", [0.5])
        data.setdefault("std", [0.5])
    try:
        return Preprocess.from_json(data)
    except ValueError as exc:
        raise UsageError(f"bad preprocessing ({exc}); fix --size/--resize/--mode/--mean/--std") from None
