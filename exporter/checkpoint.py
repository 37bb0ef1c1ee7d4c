"""Safe checkpoint loading and architecture resolution.

Checkpoints are untrusted: they are read with ``torch.load(weights_only=True)`` (or safetensors),
which refuses any pickle that would construct arbitrary objects or run code. The architecture code
the user points at is trusted: it is imported and run.
"""

from __future__ import annotations

import inspect
import pickle
import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .architecture import resolve_factory
from .errors import ArchitectureError, CheckpointError
from .files import check_readable_file

# The keys under which training scripts and public packages keep the model's state_dict beside the
# optimizer's and their metadata: Lightning and timm ``state_dict``, torchvision's references and
# fairseq ``model``, the PyTorch tutorials ``model_state_dict``, others ``model_state``, ``net``,
# ``network``, ``weights``, ``params``. Tried in this order; the first that holds a state_dict loads.
_WRAPPER_KEYS = ("state_dict", "model_state_dict", "model_state", "model", "net", "network", "weights", "params")
_PREFIXES = ("module.", "_orig_mod.")


_SAVE_STATE_DICT = "save only the weights with torch.save(model.state_dict(), path)"

# Leading bytes of files people pass by mistake. Checked before torch parses anything.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"BZh", "a bzip2 archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-zip archive"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file (Keras/h5py)"),
    (b"%PDF", "a PDF document"),
    (b"\x7fELF", "an executable"),
)
_PICKLE_PROTO = 0x80  # PROTO opcode: a legacy (non-zip) torch.save file or a raw pickle starts with it
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def load_state_dict(path: Path, notes: list[str] | None = None) -> dict[str, Any]:
    """Read a checkpoint into a flat ``{name: tensor}`` dict without unpickling code.

    Accepts a bare state_dict, a dict holding one under a key of ``_WRAPPER_KEYS`` (``state_dict``,
    ``model_state``, ``model``, ...; ``notes`` gets a line naming the key), keys prefixed by
    ``module.`` (DataParallel) or ``_orig_mod.`` (torch.compile), and safetensors (by suffix or by
    content). Anything else is a :class:`CheckpointError` naming the file (and the key that holds a
    state_dict, when another key does).
    """
    # a recording, a bundle or a build server loads without the run's early check: the same words here, before any open
    check_readable_file(path, "checkpoint", "pass the path of a .pth/.pt/.safetensors state_dict")
    head = _head(path)
    if path.suffix == ".safetensors" or _looks_like_safetensors(head, path):
        obj = _load_safetensors(path)
    else:
        _refuse_non_checkpoint(path, head)
        obj = _load_torch(path, mmap=head.startswith(_ZIP_MAGIC))
    state = _unwrap(obj, path, notes)
    return _strip_prefixes(state)


def _head(path: Path, size: int = 64) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint ({exc.strerror or exc}); check its permissions") from None


def _looks_like_safetensors(head: bytes, path: Path) -> bool:
    # safetensors: an 8-byte little-endian header length, then a JSON object.
    if len(head) < 10 or head[8:9] != b"{":
        return False
    try:
        size = path.stat().st_size
    except OSError:
        return False
    return 2 <= int.from_bytes(head[:8], "little") <= size - 8


def _refuse_non_checkpoint(path: Path, head: bytes) -> None:
    """Say what the file is when it plainly is not a torch checkpoint (zip or pickle)."""
    fix = f"pass the trained model's checkpoint; {_SAVE_STATE_DICT}"
    for magic, what in _MAGIC:
        if head.startswith(magic):
            raise CheckpointError(f"{path}: not a PyTorch checkpoint, it is {what}; {fix}")
    if head.startswith(_ZIP_MAGIC):
        _check_zip_layout(path)
        return
    if head[0] == _PICKLE_PROTO:
        return
    if _is_text(head):
        raise CheckpointError(f"{path}: not a PyTorch checkpoint, it is a text file; {fix}")
    raise CheckpointError(f"{path}: not a PyTorch checkpoint (neither a zip archive nor a pickle); {fix}")


def _is_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        # a multi-byte character cut at the end of the sample is still text
        try:
            text = head[:-3].decode("utf-8")
        except UnicodeDecodeError:
            return False
    return bool(text) and all(c.isprintable() or c in "\t\r\n\f" for c in text)


def _check_zip_layout(path: Path) -> None:
    """A torch checkpoint is a zip holding ``<name>/data.pkl``; TorchScript archives hold ``constants.pkl`` too."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, NotImplementedError) as exc:
        raise CheckpointError(
            f"{path}: truncated or corrupt zip archive ({' '.join(str(exc).split())[:120] or type(exc).__name__}); "
            "the copy or download was probably cut short: copy it again or re-save it with torch.save"
        ) from None
    if any(n.endswith("constants.pkl") for n in names) and any("/code/" in n or n.startswith("code/") for n in names):
        raise CheckpointError(
            f"{path}: a TorchScript archive, not a state_dict; pass the checkpoint it was exported from, or {_SAVE_STATE_DICT}"
        )
    if not (any(n.endswith("data.pkl") for n in names) and any(n.endswith("version") for n in names)):
        shown = ", ".join(names[:3]) or "nothing"
        raise CheckpointError(
            f"{path}: a zip archive but not a PyTorch checkpoint (it holds {shown}; no data.pkl and version records); "
            f"{_SAVE_STATE_DICT}"
        )


_GLOBAL = re.compile(r"GLOBAL ([A-Za-z_][\w.]*)")


def _load_torch(path: Path, mmap: bool = False) -> Any:
    """The checkpoint's objects, read without unpickling code; ``mmap`` (a zip checkpoint): its tensors mapped from the
    file, which the model takes over (``build_model``): one copy, shared by every process mapping the file (issue 43)."""
    import torch

    try:
        with warnings.catch_warnings():
            # torch warns about unusual pickle protocols and TorchScript zips; the error below says it all.
            warnings.simplefilter("ignore")
            try:
                return torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
            except (RuntimeError, UnicodeError):  # a zip torch cannot map, a name its C++ side cannot take: read it
                if not mmap:
                    raise
            return torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(_describe_unpickling(path, str(exc))) from None
    except Exception as exc:  # anything raised while parsing an untrusted file is about that file
        reason = _first_sentence(str(exc)) or type(exc).__name__
        raise CheckpointError(
            f"{path}: truncated, corrupt or not a PyTorch checkpoint ({type(exc).__name__}: {reason[:160]}); "
            "copy it again or re-save it with torch.save"
        ) from None


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    for noise in (" This is an internal miniz error.", " (Could this error message be improved?"):
        text = text.split(noise)[0]
    return text


def _describe_unpickling(path: Path, message: str) -> str:
    """Turn torch's multi-paragraph weights_only refusal into one line naming what was asked for."""
    found = _GLOBAL.search(message)
    if found:
        name = found.group(1)
        looks_like_model = name.rsplit(".", 1)[-1][:1].isupper() and not name.startswith(("builtins.", "posix.", "os.", "nt."))
        what = f"a whole pickled object ({name}: a model saved with torch.save(model)?)" if looks_like_model else name
        return (
            f"{path}: refused: its pickle asks for {what}, which a weights-only load never imports or runs; "
            f"{_SAVE_STATE_DICT}"
        )
    operand = re.search(r"Unsupported operand (\d+)", message)
    detail = f" (pickle opcode {operand.group(1)} is not allowed)" if operand else ""
    return (
        f"{path}: refused: not a weights-only pickle{detail}; it is corrupt or holds objects beyond tensors; "
        f"{_SAVE_STATE_DICT}"
    )


def _load_safetensors(path: Path) -> Any:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise CheckpointError(f"{path}: reading .safetensors needs the safetensors package: pip install safetensors") from None
    try:
        return load_file(str(path), device="cpu")
    except Exception as exc:  # safetensors raises its own SafetensorError and others
        reason = _first_sentence(str(exc)) or type(exc).__name__
        raise CheckpointError(f"{path}: not a readable safetensors file ({reason[:160]}); copy it again or re-save it") from None


def _is_state_dict(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(isinstance(k, str) for k in value) and _all_tensors(value)


def _listed(keys: list[str], show: int = 6) -> str:
    shown = ", ".join(repr(k[:40]) for k in keys[:show])
    return shown + (f", ... {len(keys)} in all" if len(keys) > show else "")


def _unwrap(obj: Any, path: Path, notes: list[str] | None = None) -> dict[str, Any]:
    """The state_dict ``obj`` is, or holds under a wrapper key (a note names it)."""
    import torch

    if isinstance(obj, Mapping) and obj and not _all_tensors(obj):
        key = next((k for k in _WRAPPER_KEYS if _is_state_dict(obj.get(k))), None)
        if key is not None:
            others = [str(k) for k in obj if k != key]
            if notes is not None:
                beside = f", beside {_listed(others)}" if others else ""
                notes.append(f"checkpoint {path.name}: loaded the state_dict under its key {key!r} ({len(obj[key])} tensors{beside})")
            obj = obj[key]
        elif not any(isinstance(v, torch.Tensor) for v in obj.values()):  # a wrapper: metadata, no weights at its top
            keys = [str(k) for k in obj]
            holders = [str(k) for k, v in obj.items() if _is_state_dict(v)]
            if holders:
                raise CheckpointError(
                    f"{path}: its state_dict is under the key {holders[0]!r}, which export-check does not unwrap (it unwraps "
                    f"{', '.join(_WRAPPER_KEYS)}); save that state_dict alone: "
                    f"torch.save(torch.load(path)[{holders[0]!r}], new_path)"
                )
            wrapped = [k for k in _WRAPPER_KEYS if k in obj]
            held = f" (its key {wrapped[0]!r} holds {_describe_value(obj[wrapped[0]])})" if wrapped else ""
            raise CheckpointError(
                f"{path}: a dict of {_listed(keys)} that holds no state_dict: no key maps parameter names to tensors{held}; "
                "save one with torch.save(model.state_dict(), path)"
            )
    if not isinstance(obj, Mapping) or not obj:
        raise CheckpointError(
            f"{path}: holds a {type(obj).__name__}, not a state_dict of tensors; "
            "save one with torch.save(model.state_dict(), path)"
        )
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(
            f"{path}: not a state_dict: {len(bad)} entries are not name->tensor (first: {str(bad[0])[:60]!r}); "
            "save one with torch.save(model.state_dict(), path)"
        )
    for key, tensor in obj.items():
        what = _unusual_tensor(tensor)
        if what is not None:
            raise CheckpointError(
                f"{path}: {key[:80]} is {what}, not a dense tensor of real numbers; export-check exports the float model: "
                "save its state_dict with dense float weights (to_dense(), dequantize(), real values on the CPU)"
            )
    return dict(obj)


def _describe_value(value: Any) -> str:
    """What a wrapper key holds instead of a state_dict, in a few words."""
    if isinstance(value, Mapping):
        return "an empty dict" if not value else f"a dict of {len(value)} entries, no state_dict of tensors"
    return f"a {type(value).__name__}"


def _unusual_tensor(tensor: Any) -> str | None:
    """What makes ``tensor`` something ``load_state_dict`` cannot copy into a float model, or None."""
    import torch

    if tensor.is_meta:
        return "a meta tensor (a shape without data)"
    if tensor.layout != torch.strided:
        return f"a sparse tensor ({str(tensor.layout).removeprefix('torch.')})"
    if tensor.is_quantized:
        return f"a quantized tensor ({str(tensor.dtype).removeprefix('torch.')})"
    if getattr(tensor, "is_nested", False):
        return "a nested tensor"
    if tensor.is_complex():
        return f"a complex tensor ({str(tensor.dtype).removeprefix('torch.')})"
    if tensor.device.type != "cpu":
        return f"a tensor on {tensor.device.type}"
    return None


def _all_tensors(mapping: Mapping) -> bool:
    import torch

    return all(isinstance(v, torch.Tensor) for v in mapping.values())


def _strip_prefixes(state: dict[str, Any]) -> dict[str, Any]:
    for prefix in _PREFIXES:
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def build_model(
    spec: str, kwargs: Mapping[str, Any], state: Mapping[str, Any], checkpoint: Path, root: Path | None = None
) -> Any:
    """Construct the architecture, load ``state`` strictly, and return it in eval mode on the CPU."""
    import torch

    factory = resolve_factory(spec, root)
    try:
        model = factory(**kwargs)
    except TypeError as exc:
        try:
            signature = str(inspect.signature(factory))
        except (TypeError, ValueError):
            signature = "(...)"
        raise ArchitectureError(f"{spec}{signature}: cannot construct with {dict(kwargs)}: {exc}; fix --arch-kwargs") from None
    except Exception as exc:
        raise ArchitectureError(f"{spec}: constructing the model failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, torch.nn.Module):
        raise ArchitectureError(f"{spec}: returned a {type(model).__name__}, not a torch.nn.Module")
    expected = model.state_dict()
    # every key the model and the checkpoint do not share, and every shape they disagree on, in one error
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [f"{k} {tuple(state[k].shape)}!={tuple(expected[k].shape)}"
              for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or shapes:
        parts = [f"{len(items)} {label}: {', '.join(items[:3])}" + (f", … {len(items)} in all" if len(items) > 3 else "")
                 for label, items in (("missing", missing), ("unexpected", unexpected), ("shape mismatch", shapes)) if items]
        raise CheckpointError(
            f"{checkpoint}: does not fit {spec} ({'; '.join(parts)}); check --arch and --arch-kwargs match the trained model")
    # Where every tensor already has the model's dtype, the model takes the checkpoint's tensors over (mapped from the
    # file: _load_torch) instead of copying them into the ones its factory made: one copy of the weights, not two.
    # A model whose factory ties parameters (one Parameter under two names) keeps its ties: copied into, not assigned.
    held = [id(p) for _, p in model.named_parameters(remove_duplicate=False)]
    assign = len(held) == len(set(held)) and all(
        isinstance(v, torch.Tensor) and v.dtype == expected[k].dtype and v.device.type == "cpu" for k, v in state.items())
    try:
        model.load_state_dict(state, strict=True, assign=assign)
    except (RuntimeError, TypeError, ValueError) as exc:  # a tensor torch cannot copy into its parameter
        reason = " ".join(str(exc).split())[:200]
        raise CheckpointError(f"{checkpoint}: its weights do not load into {spec} ({reason}); re-save the model's own state_dict") from None
    return model.to("cpu").eval()

