"""A golden set's inputs decoded whole from their untrusted bytes: arrays, samples and images.

Reading a file (bounded, beneath the golden folder, hash-checked) is :mod:`export_check.golden.goldenset`'s;
everything that turns its bytes into arrays is here, each bound checked beside the parsing it bounds
(the bounds themselves are named in reading.py, where docs/explanation/trust-model.md lists them):

- ``.npy``: the header read and checked (dtype, shape, the bytes it claims against the bytes there are,
  ``ARRAY_MAX_BYTES``) before numpy allocates anything (:func:`npy_header`, :func:`load_npy`);
- ``.npz``: each member's declared size and header checked before it is decompressed, the archive's
  total held to ``ARRAY_MAX_BYTES`` (the reference) or ``SAMPLE_MAX_BYTES`` (one sample) (:func:`load_npz`);
- a sample's decoded size as its headers declare it, read without decompressing anything
  (:func:`declared_bytes`, :func:`declared_sample_bytes`);
- images: only PNG, JPEG, BMP and WEBP, their pixel count checked from the header before decoding,
  then preprocessed per the :class:`~export_check.golden.preprocess.Preprocess` spec the manifest records;
- a golden input (:func:`decode_input`) or a format-2 sample (:func:`decode_sample`) checked against
  the signature's inputs (:func:`conform_sample`).

>>> spec = Preprocess(size=(32, 32), mode="RGB", mean=(0.5,) * 3, std=(0.5,) * 3)
>>> preprocess_file(Path("golden/images/0000.png"), spec).shape  # doctest: +SKIP
(3, 32, 32)
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GoldenError
from .preprocess import Preprocess as Preprocess  # named here too, where the models, benchmarks and tests import it from
from .reading import ARRAY_MAX_BYTES, SAMPLE_MAX_BYTES

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
TENSOR_SUFFIX = ".npy"
# A decoded image, and the resized image before its crop, at most MAX_IMAGE_PIXELS (checked from the
# header, before decoding; a 16-bit image of that size peaks near 0.5 GB while converted); the
# preprocessed input's own bounds are preprocess.MAX_SIDE and MAX_PIXELS.
MAX_IMAGE_PIXELS = 50_000_000


# --- arrays ------------------------------------------------------------------------------------

_NPY_HEADER_MAX = 10_000  # numpy's own default limit for header text


def npy_header(data: bytes, shown: Path, what: str = "array", fix: str = "replace it or re-record") -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data offset)`` of an ``.npy`` file's bytes, checked before anything is allocated:
    a readable header, no object dtype, and exactly as many data bytes as the header claims, at most
    ``ARRAY_MAX_BYTES``. ``fix`` ends each refusal (a bundle's member says its own)."""
    fmt = np.lib.format
    buf = io.BytesIO(data)
    try:
        version = fmt.read_magic(buf)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(buf, max_header_size=_NPY_HEADER_MAX)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(buf, max_header_size=_NPY_HEADER_MAX)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except Exception as exc:  # a crafted header can raise ValueError, SyntaxError, TypeError, ...
        reason = " ".join(str(exc).split())[:120]
        raise GoldenError(f"{shown}: not a readable .npy {what} ({type(exc).__name__}: {reason}); {fix}") from None
    if dtype.hasobject:
        raise GoldenError(f"{shown}: holds pickled data or object arrays, which export-check never loads; save plain numeric arrays")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise GoldenError(f"{shown}: .npy header has shape {shape!r}; {fix}")
    count = 1
    for d in shape:
        count *= d
    claimed = count * dtype.itemsize
    if claimed > ARRAY_MAX_BYTES:
        raise GoldenError(f"{shown}: .npy header claims {dtype} {tuple(shape)}, {claimed:,} bytes, over the {ARRAY_MAX_BYTES:,}-byte "
                          f"memory budget; {fix}")
    offset = buf.tell()
    if len(data) - offset != claimed:
        raise GoldenError(f"{shown}: .npy header claims {dtype} {tuple(shape)} ({claimed:,} bytes) but the file holds "
                          f"{len(data) - offset:,} bytes of data; {fix}")
    return tuple(shape), dtype, offset


def load_npy(data: bytes, shown: Path, what: str = "array", fix: str = "replace it or re-record") -> np.ndarray:
    """An ``.npy`` file's array, its header checked first (:func:`npy_header`), no pickles."""
    npy_header(data, shown, what, fix)
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # the header was checked; a damaged body can still fail
        reason = " ".join(str(exc).split())[:120]
        raise GoldenError(f"{shown}: not a readable .npy {what} ({type(exc).__name__}: {reason}); {fix}") from None
    if not isinstance(array, np.ndarray):
        raise GoldenError(f"{shown}: not a .npy {what}; {fix}")
    return array


def declared_bytes(data: bytes, name: str, shown: Path) -> int:
    """The decoded size a sample file's own headers declare, read without decompressing anything: an
    ``.npz``'s members' uncompressed sizes, an ``.npy``'s array, a ``.safetensors`` file's bytes; 0 for an
    image (bounded by its pixel count when decoded). A file that cannot be read so declares 0 here
    and is refused, naming it, when it is decoded."""
    lower = name.lower()
    if lower.endswith(".npz"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                return sum(info.file_size for info in archive.infolist())
        except Exception:  # not a zip: its decoding says so
            return 0
    if lower.endswith(".npy"):
        try:
            shape, dtype, _ = npy_header(data, shown)
        except GoldenError:
            return 0
        return int(np.prod(shape, dtype=object)) * dtype.itemsize
    return len(data) if lower.endswith(".safetensors") else 0


def check_sample_size(size: int, shown: Path, declared: str = "declares") -> None:
    """One sample's decoded size within ``SAMPLE_MAX_BYTES``, or one GoldenError line naming it."""
    if size > SAMPLE_MAX_BYTES:
        raise GoldenError(f"{shown}: {declared} {size:,} bytes of arrays once decompressed, over the {SAMPLE_MAX_BYTES:,} bytes one "
                          "sample may hold; replace it or re-record")


def declared_sample_bytes(data: bytes, name: str, shown: Path) -> int:
    """The decoded bytes the sample file ``name``'s bytes declare (:func:`declared_bytes`); one GoldenError
    naming it when that is over ``SAMPLE_MAX_BYTES``."""
    size = declared_bytes(data, name, shown)
    check_sample_size(size, shown)
    return size


def load_npz(data: bytes, shown: Path, what: str = "sample", budget: int = ARRAY_MAX_BYTES) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive's bytes, by key (member name less ``.npy``), each member's
    declared size and header checked before it is decompressed or allocated, its decompressed size
    held to the declared one; the total held to ``budget`` (``SAMPLE_MAX_BYTES`` for a sample)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception:
        if data[:1] == b"\x80":  # a pickle's protocol opcode: numpy would have to unpickle it
            raise GoldenError(f"{shown}: holds pickled data or object arrays, which export-check never loads; save plain numeric arrays "
                              "with numpy.savez(name=array, ...)") from None
        if data[:6] == b"\x93NUMPY":
            raise GoldenError(f"{shown}: not an .npz archive (holds one bare array); save the {what} with numpy.savez(name=array, ...)") \
                from None
        raise GoldenError(f"{shown}: not a readable .npz archive of arrays (not a zip file); replace it or re-record") from None
    arrays: dict[str, np.ndarray] = {}
    left = budget
    with archive:
        declared = sum(info.file_size for info in archive.infolist())
        if declared > budget:  # before anything is decompressed
            raise GoldenError(f"{shown}: declares {declared:,} bytes of arrays once decompressed, over the {budget:,} bytes one {what} "
                              "may hold; replace it or re-record")
        for info in archive.infolist():
            member = f"{shown}: member {info.filename!r}"
            if not info.filename.endswith(".npy"):
                raise GoldenError(f"{member} is not an array (an .npz holds .npy members only); replace it or re-record")
            if info.file_size > left:
                raise GoldenError(f"{member} is {info.file_size:,} bytes uncompressed, over the {budget:,}-byte memory budget "
                                  "of one archive; replace it or re-record")
            try:
                with archive.open(info) as fh:
                    raw = fh.read(info.file_size + 1)
            except Exception as exc:  # bad CRC, unsupported compression, truncated data
                raise GoldenError(f"{member} cannot be extracted ({type(exc).__name__}: {' '.join(str(exc).split())[:120]}); "
                                  "replace it or re-record") from None
            if len(raw) > info.file_size:
                raise GoldenError(f"{member} holds more than the size its zip header says; replace it or re-record")
            left -= len(raw)
            arrays[info.filename[: -len(".npy")]] = load_npy(raw, shown, f"array ({info.filename})")
    return arrays


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
    arrays = read_safetensors(data, shown) if name.lower().endswith(".safetensors") else load_npz(data, shown, "sample", SAMPLE_MAX_BYTES)
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
