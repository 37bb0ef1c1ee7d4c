"""A golden set's inputs: finding them, decoding them (untrusted bytes) and preprocessing images.

The same :class:`Preprocess` spec turns an image file into the model's input when a golden set is
recorded, when it is replayed and when the bundled models are trained, so all three agree. It is
recorded as data in the manifest; :func:`preprocess_from_args` builds it from the command line.

>>> spec = Preprocess(size=(32, 32), mode="RGB", mean=(0.5,) * 3, std=(0.5,) * 3)
>>> preprocess_file(Path("golden/images/0000.png"), spec).shape  # doctest: +SKIP
(3, 32, 32)
"""

from __future__ import annotations

import io
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GoldenError, UsageError
from .reading import SAMPLE_MAX_BYTES, check_sample_size, load_npy, load_npz

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
TENSOR_SUFFIX = ".npy"
_MODES = {"RGB": 3, "L": 1}
_INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
# Memory bounds (docs/explanation/trust-model.md): a preprocessed input is at most MAX_SIDE on a side and
# MAX_PIXELS in all (2048² RGB float32 is 48 MiB); a decoded image, and the resized image before its
# crop, at most MAX_IMAGE_PIXELS (checked from the header, before decoding; a 16-bit image of that
# size peaks near 0.5 GB while converted).
MAX_SIDE = 4096
MAX_PIXELS = 2048 * 2048
MAX_IMAGE_PIXELS = 50_000_000
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


# Only the formats golden sets hold. Pillow would otherwise sniff and decode dozens of formats from
# untrusted bytes whatever the file is called, EPS among them, which runs Ghostscript.
IMAGE_FORMATS = ("PNG", "JPEG", "BMP", "WEBP")


def open_image(source: Any, shown: Path):  # -> PIL.Image.Image
    """Decode an image (a path or a binary file object) fully, or raise :class:`GoldenError` naming ``shown``."""
    import warnings

    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # A header claiming a huge image is an error here, not a warning line on stderr.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(source, formats=IMAGE_FORMATS) as img:
                width, height = img.size  # from the header: nothing is decoded yet
                if width * height > MAX_IMAGE_PIXELS:
                    raise GoldenError(f"{shown}: a {width}x{height} image, over the {MAX_IMAGE_PIXELS:,} pixels export-check decodes; "
                                      "scale it down or replace it")
                img.load()
                return ImageOps.exif_transpose(img)
    except GoldenError:
        raise
    except FileNotFoundError:
        raise GoldenError(f"{shown}: image not found; restore it or re-record the golden set") from None
    except UnidentifiedImageError:
        raise GoldenError(
            f"{shown}: not a decodable {'/'.join(IMAGE_FORMATS)} image; replace the file or re-record the golden set"
        ) from None
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise GoldenError(f"{shown}: image too large to decode safely ({exc}); replace the file") from None
    except Exception as exc:  # a damaged file can make a decoder raise almost anything
        raise GoldenError(
            f"{shown}: cannot decode image ({type(exc).__name__}: {' '.join(str(exc).split())[:120]}); "
            "replace the file or re-record the golden set"
        ) from None


def load_image(path: Path):  # -> PIL.Image.Image
    """Decode an image file fully, or raise :class:`GoldenError` naming it."""
    return open_image(path, path)


def _to_mode(img, mode: str):
    from PIL import Image

    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        # 16/32-bit grayscale: scale to 8 bits rather than clip.
        # float32 for 16 bits (exact enough: x/257 is never within 2e-3 of a rounding boundary) keeps
        # the peak at ~7 bytes a pixel; 32-bit values need float64.
        arr: Any = np.asarray(img, dtype=np.float32 if img.mode.startswith("I;16") else np.float64)
        peak = 65535.0 if img.mode.startswith("I;16") else max(float(arr.max()), 1.0)
        arr *= 255.0 / peak
        arr += 0.5
        np.clip(arr, 0, 255, out=arr)
        img = Image.fromarray(arr.astype(np.uint8), mode="L")
        del arr
    if img.mode == "P":
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA"):
        # Composite transparent pixels onto white, as a viewer shows them, instead of dropping alpha.
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba)
    return img.convert(mode)


def preprocess_image(img, spec: Preprocess) -> np.ndarray:
    """Turn a decoded PIL image into a ``float32`` ``C×H×W`` array per ``spec``."""
    from PIL import Image

    resample = {
        "bilinear": Image.Resampling.BILINEAR,
        "bicubic": Image.Resampling.BICUBIC,
        "nearest": Image.Resampling.NEAREST,
    }[spec.interpolation]
    img = _to_mode(img, spec.mode)
    height, width = spec.size
    if spec.resize is None:
        img = img.resize((width, height), resample)
    else:
        scale = spec.resize / min(img.size)
        new_w, new_h = max(width, round(img.size[0] * scale)), max(height, round(img.size[1] * scale))
        if new_w * new_h > MAX_IMAGE_PIXELS:
            raise ValueError(f"resizing its {img.size[0]}x{img.size[1]} pixels to a shorter side of {spec.resize} makes "
                             f"{new_w}x{new_h}, over {MAX_IMAGE_PIXELS:,} pixels")
        img = img.resize((new_w, new_h), resample)
        left, top = (new_w - width) // 2, (new_h - height) // 2
        img = img.crop((left, top, left + width, top + height))
    arr = np.asarray(img, dtype=np.float32) / np.float32(255.0)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    arr = arr.transpose(2, 0, 1)
    mean = np.asarray(spec.mean, dtype=np.float32)[:, None, None]
    std = np.asarray(spec.std, dtype=np.float32)[:, None, None]
    return np.ascontiguousarray((arr - mean) / std, dtype=np.float32)


def preprocess_file(path: Path, spec: Preprocess) -> np.ndarray:
    return preprocess_image(load_image(path), spec)


# --- golden inputs ---------------------------------------------------------------------------


def decode_input(data: bytes, name: str, preprocess: Preprocess | None, shown: Path) -> np.ndarray:
    """Decode one golden input (untrusted bytes) into the model's input, or raise a one-line GoldenError."""
    if name.lower().endswith(TENSOR_SUFFIX):
        check_sample_size(len(data), shown, "holds")  # an .npy file is its array, uncompressed
        array = load_npy(data, shown, "tensor")  # header checked before anything is allocated
        if array.dtype.kind not in "iuf":  # no bool, complex, strings
            what = getattr(array, "dtype", type(array).__name__)
            raise GoldenError(f"{shown}: holds {what}, not real numbers; replace it or re-record")
        if not np.all(np.isfinite(array)):
            raise GoldenError(f"{shown}: holds NaN or Inf values; replace it or re-record")
        return array.astype(np.float32)
    if preprocess is None:
        raise GoldenError(f"{shown}: an image, but the manifest has no preprocess spec; re-record the golden set")
    img = open_image(io.BytesIO(data), shown)
    try:
        return preprocess_image(img, preprocess)
    except (ValueError, OSError, MemoryError) as exc:
        raise GoldenError(f"{shown}: cannot convert image ({type(exc).__name__}: {exc}); replace it or re-record the golden set") from None


# --- format-2 samples: every named input of one sample in one archive --------------------------

SAMPLE_SUFFIXES = (".npz", ".safetensors")
SAMPLE_DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")  # signature.INPUT_DTYPES


def is_sample_archive(name: str) -> bool:
    return name.lower().endswith(SAMPLE_SUFFIXES)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"


def read_npz(data: bytes, shown: Path, what: str = "sample", budget: int = SAMPLE_MAX_BYTES) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive (untrusted bytes), in the archive's order, loaded without
    pickles; anything else (a pickle, an object array, a plain ``.npy``, a damaged zip) is a one-line
    GoldenError naming ``shown``."""
    return load_npz(data, shown, what, budget)


def read_safetensors(data: bytes, shown: Path) -> dict[str, np.ndarray]:
    try:
        from safetensors.numpy import load
    except ImportError:
        raise GoldenError(f"{shown}: reading .safetensors samples needs the safetensors package: pip install safetensors") from None
    check_sample_size(len(data), shown, "holds")  # a .safetensors file is its arrays, uncompressed
    try:
        return dict(load(data))
    except Exception as exc:  # SafetensorError, or anything a crafted header provokes
        raise GoldenError(f"{shown}: not a readable .safetensors file ({_reason(exc)}); replace it or re-record") from None


def read_sample(data: bytes, name: str, shown: Path) -> dict[str, np.ndarray]:
    """One sample archive's arrays by input name, in the file's order (numpy arrays of the dtypes
    ``SAMPLE_DTYPES``), or a one-line GoldenError naming ``shown``."""
    arrays = read_safetensors(data, shown) if name.lower().endswith(".safetensors") else read_npz(data, shown)
    if not arrays:
        raise GoldenError(f"{shown}: holds no arrays; save one array per model input, named after forward's parameters")
    for key, array in arrays.items():
        if not isinstance(array, np.ndarray) or str(array.dtype) not in SAMPLE_DTYPES:
            what = getattr(array, "dtype", type(array).__name__)
            raise GoldenError(f"{shown}: input {key!r} holds {what}; a sample holds arrays of {', '.join(SAMPLE_DTYPES)}")
    return arrays


def decode_sample(data: bytes, name: str, inputs: Any, preprocess: Preprocess | None, shown: Path) -> dict[str, np.ndarray]:
    """One format-2 sample's named inputs from its file's bytes: a sample archive's arrays, or the one
    input's image or ``.npy`` tensor, each checked against the signature's inputs (:func:`conform_sample`)."""
    if not is_sample_archive(name):  # an image or .npy tensor: the one input
        return conform_sample({inputs[0].name: decode_input(data, name, preprocess, shown)}, inputs, shown)
    return conform_sample(read_sample(data, name, shown), inputs, shown)


def conform_sample(arrays: dict[str, np.ndarray], inputs: Any, shown: Path) -> dict[str, np.ndarray]:
    """A sample's arrays checked against the signature's inputs (``signature.InputSpec``s): exactly
    these names, a dtype that casts to each input's without loss, finite floats, and room for the
    batch axis; returned cast to the inputs' dtypes, in the signature's order."""
    names = [spec.name for spec in inputs]
    missing = [n for n in names if n not in arrays]
    extra = [n for n in arrays if n not in names]
    if missing or extra:
        parts = ([f"no {', '.join(map(repr, missing))}"] if missing else []) + ([f"unexpected {', '.join(map(repr, extra))}"] if extra else [])
        raise GoldenError(f"{shown}: holds inputs {', '.join(map(repr, arrays))} ({'; '.join(parts)}); the golden set's inputs are "
                          f"{', '.join(map(repr, names))}; fix the file or re-record")
    out: dict[str, np.ndarray] = {}
    for spec in inputs:
        array = arrays[spec.name]
        target = np.dtype(spec.dtype)
        if array.dtype != target:
            if not np.can_cast(array.dtype, target, casting="same_kind"):
                raise GoldenError(f"{shown}: input {spec.name!r} holds {array.dtype}, the golden set's input is {spec.dtype}; "
                                  "fix the file or re-record")
            cast = array.astype(target)
            if array.dtype.kind in "iub" and not np.array_equal(cast.astype(array.dtype), array):
                raise GoldenError(f"{shown}: input {spec.name!r} holds {array.dtype} values that do not fit {spec.dtype}; "
                                  "fix the file or re-record")
            array = cast
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise GoldenError(f"{shown}: input {spec.name!r} holds NaN or Inf values; replace it or re-record")
        if array.size == 0:  # nothing to run the model on (a 0-d array holds one value: it is up to the model)
            raise GoldenError(f"{shown}: input {spec.name!r} holds no values (shape {tuple(array.shape)}); replace it or re-record")
        if spec.batch_axis > array.ndim:
            raise GoldenError(f"{shown}: input {spec.name!r} has shape {tuple(array.shape)} without its batch axis, so its batch "
                              f"axis can be 0..{array.ndim}, not {spec.batch_axis}; fix the file or re-record")
        out[spec.name] = array
    return out


def sample_files(folder: Path) -> list[Path]:
    """The sample archives (``.npz``, ``.safetensors``) directly in ``folder``, sorted by name; [] when none (or no folder)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and is_sample_archive(p.name))


def image_files(folder: Path) -> list[Path]:
    """The images (and .npy tensors) directly in ``folder``, sorted by name."""
    if not folder.is_dir():
        raise GoldenError(f"{folder}: not a directory of images; pass a folder of .png/.jpg/.npy files")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in (*IMAGE_SUFFIXES, TENSOR_SUFFIX))
    if not files:
        raise GoldenError(f"{folder}: holds no .png/.jpg/.jpeg/.bmp/.webp/.npy files; add some images")
    return files


def finite_or_raise(array: np.ndarray, what: str) -> None:
    if not np.all(np.isfinite(array)):
        bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        raise GoldenError(f"{what}: the model produced {bad} NaN/Inf logits; refusing to record them as the reference")


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

