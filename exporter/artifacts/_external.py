"""ONNX files past protobuf's 2 GiB limit: the weights in ONE external-data file beside the graph.

A protobuf message cannot pass 2 GiB, so an ONNX model whose weights do not fit keeps them outside
the graph, in files the graph names by a ``location`` relative to its own folder, with each tensor's
offset and length. Every ONNX kind here writes such a model in one layout: the graph ``<kind>.onnx``
and ONE file ``<kind>.onnx.data`` beside it (artifacts/parts.py), tensors aligned to ``ALIGN`` bytes
so that onnxruntime can map them. One file, not one per tensor, because it is the layout optimum and
torch.onnx's dynamo exporter write and onnxruntime's quantizer and ``onnx.save(...,
all_tensors_to_one_file=True)`` write, so the deployed set is two files whatever the model; the legacy
exporter's own layout (one file per tensor, named after the tensor: 116 files for the 2.9 GB model of
issue 43, one of them ``pos``) can collide with any other file in its folder, and every commit, cache
entry and bundle member would multiply by it.

When: a model whose graph and weights total more than ``external_above()`` bytes (``EXTERNAL_ABOVE``,
the protobuf limit less room for the graph; the environment variable ``EXPORT_CHECK_ONNX_EXTERNAL_ABOVE``
lowers it, as the tests do to put a 1 MB model on this path) is written with external data; any other
with its weights inline, as before. The layout follows the size alone, whatever the exporter chose.

How: an exporter writes into a scratch folder beside the artifact (``scratch``), under the artifact's
own name; ``place`` then makes that file the artifact: a single ``<name>.data`` the exporter wrote is
renamed (no byte copied), any other layout is streamed into one file tensor by tensor (the weights are
never all in memory), an inline model over the limit is re-saved with external data.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ArtifactError
from .parts import data_name

PROTOBUF_LIMIT = 2 << 30  # 2 GiB: what one protobuf message may hold
EXTERNAL_ABOVE = PROTOBUF_LIMIT - (64 << 20)  # the weights' room when the graph itself takes up to 64 MiB
ENV = "EXPORT_CHECK_ONNX_EXTERNAL_ABOVE"
ALIGN = 4096  # each tensor's offset in the .data file: a page, as onnx.save aligns, so that onnxruntime may map it
CHUNK = 16 << 20


def external_above() -> int:
    """The size above which an ONNX artifact keeps its weights in ``<name>.data``: ``EXTERNAL_ABOVE``, or the
    environment's ``EXPORT_CHECK_ONNX_EXTERNAL_ABOVE`` (bytes) when set."""
    from ..parsing import env_bytes

    return env_bytes(ENV, EXTERNAL_ABOVE, ArtifactError, 1000000)


@contextlib.contextmanager
def scratch(path: Path) -> Iterator[Path]:
    """A fresh folder beside ``path`` (one filesystem: ``place`` renames), removed afterwards; yields the
    path there with ``path``'s name, for an exporter to write the model and any external data to."""
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.scratch-", dir=path.parent) as folder:
        yield Path(folder) / path.name


def _external_tensors(model: Any) -> list[Any]:
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    return [t for t in _get_all_tensors(model) if uses_external_data(t)]


def _fields(tensor: Any) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def _inside(folder: Path, location: str, what: str) -> Path:
    """``location`` resolved in ``folder``, refused when it leaves it (an exporter's own file never does)."""
    where = (folder / location).resolve()
    if folder.resolve() not in where.parents:
        raise ArtifactError(f"{what}: the ONNX graph keeps a tensor at {location!r}, outside its folder")
    return where


def save(model: Any, written: Path) -> None:
    """``model`` (an ``onnx.ModelProto`` in memory) saved at ``written`` (a ``scratch`` path), its weights in
    ``<name>.data`` when it is over ``external_above()`` (which ``onnx.save`` cannot serialize past 2 GiB)."""
    import onnx

    try:
        size = model.ByteSize()
    except Exception:  # a message past what protobuf can size
        size = PROTOBUF_LIMIT
    if size <= external_above():
        onnx.save(model, str(written))
        return
    onnx.save(model, str(written), save_as_external_data=True, all_tensors_to_one_file=True, location=data_name(written.name))


def place(written: Path, tmp: Path, final: Path) -> dict[str, str]:
    """Make the ONNX model an exporter wrote at ``written`` (in a ``scratch`` folder, with any external data
    beside it) the artifact ``final``: its graph at ``tmp`` (``atomic_path``'s temporary name for ``final``),
    its weights in ``final``'s folder as ``<final name>.data`` when over ``external_above()``, else inline.
    Returns the build details it adds (the external data's size)."""
    import onnx

    data = final.with_name(data_name(final.name))
    with contextlib.suppress(FileNotFoundError):
        data.unlink()  # an earlier file of this name is not this model's (onnx.save would append to it)
    if written.stat().st_size <= external_above() and not [p for p in written.parent.iterdir() if p != written]:
        # alone in its scratch folder: no tensor can be outside it, and it is within the limit; a rename, not a parse
        # of the whole model (weights included) to find that out
        os.replace(written, tmp)
        return {}
    model = onnx.load(str(written), load_external_data=False)
    external = _external_tensors(model)
    total = written.stat().st_size + _external_bytes(written.parent, external)
    if total <= external_above():
        if external:
            onnx.load_external_data_for_model(model, str(written.parent))
            for tensor in external:
                tensor.data_location = onnx.TensorProto.DEFAULT
                del tensor.external_data[:]
            onnx.save(model, str(tmp))
        else:
            os.replace(written, tmp)
        return {}
    if not external:  # inline, over the limit only because it was lowered: held whole in memory, as it was written
        onnx.load_external_data_for_model(model, str(written.parent))
        onnx.save(model, str(tmp), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name)
    elif {_fields(t).get("location") for t in external} == {data.name} and _aligned(external):
        os.replace(written.with_name(data.name), data)  # the exporter wrote our layout: a rename, no byte copied
        os.replace(written, tmp)
    else:
        _consolidate(model, external, written.parent, data)
        tmp.write_bytes(model.SerializeToString())
    return {"external_data": f"{data.name} ({data.stat().st_size:,} bytes; graph and weights total {total:,} bytes, "
                             f"over the {external_above():,} kept inline)"}


def _aligned(external: list[Any]) -> bool:
    return all(int(_fields(t).get("offset", "0")) % ALIGN == 0 for t in external)


def _external_bytes(folder: Path, external: list[Any]) -> int:
    """The bytes the external tensors take, each file counted once."""
    files = {_fields(t).get("location", "") for t in external}
    return sum(_inside(folder, name, "the export").stat().st_size for name in files if name)


def _consolidate(model: Any, external: list[Any], folder: Path, data: Path) -> None:
    """Stream every external tensor of ``model`` (its files in ``folder``, any layout) into the one file
    ``data``, each at an ``ALIGN``-ed offset, and point the tensors there: memory stays at one ``CHUNK``."""
    with open(data, "wb") as out:
        for tensor in external:
            fields = _fields(tensor)
            source = _inside(folder, fields.get("location", ""), "the export")
            offset = int(fields.get("offset", "0"))
            length = int(fields["length"]) if "length" in fields else source.stat().st_size - offset
            start = -out.tell() % ALIGN
            if start:
                out.write(b"\0" * start)
            at = out.tell()
            with open(source, "rb") as fh:
                fh.seek(offset)
                left = length
                while left > 0:
                    piece = fh.read(min(CHUNK, left))
                    if not piece:
                        raise ArtifactError(f"the export's external data {source.name} ends {left:,} bytes before tensor {tensor.name!r} does")
                    out.write(piece)
                    left -= len(piece)
            del tensor.external_data[:]  # onnx's set_external_data wants the bytes in memory, which is what this avoids
            for key, value in (("location", data.name), ("offset", str(at)), ("length", str(length))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
        out.flush()
        os.fsync(out.fileno())


def graph_io(path: Path) -> tuple[list[Any], list[Any]]:
    """The graph inputs and outputs (``onnx.ValueInfoProto``) of the ONNX file at ``path``, read without its weights.

    ``onnx.load`` parses the whole file, an inline model's weights included (a 366 MB copy for the 92 M model of
    issue 43, after every ONNX build, to read a few names and shapes). This walks the protobuf wire format of the
    file, memory-mapped, to ModelProto's ``graph`` (field 7) and in it to ``input`` (11) and ``output`` (12), and
    parses only those; every other field, the initializers too, is stepped over by its length. A file it cannot
    walk (not protobuf, cut short) is parsed whole by ``onnx.load``, which says what is wrong with it."""
    import mmap

    import onnx

    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
            inputs: list[Any] = []
            outputs: list[Any] = []
            for start, end in _fields_of(view, 0, len(view), 7):
                for field, into in ((11, inputs), (12, outputs)):
                    into.extend(onnx.ValueInfoProto.FromString(view[a:b]) for a, b in _fields_of(view, start, end, field))
            return inputs, outputs
    except (ValueError, OSError, IndexError):  # an empty file cannot be mapped; a malformed one cannot be walked
        model = onnx.load(str(path), load_external_data=False)
        return list(model.graph.input), list(model.graph.output)


def node_count(path: Path) -> int:
    """How many nodes the graph of the ONNX file at ``path`` holds, read as ``graph_io`` reads (without the weights)."""
    import mmap

    import onnx

    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return sum(len(_fields_of(view, start, end, 1)) for start, end in _fields_of(view, 0, len(view), 7))
    except (ValueError, OSError, IndexError):
        return len(onnx.load(str(path), load_external_data=False).graph.node)


def _fields_of(view: Any, start: int, end: int, wanted: int) -> list[tuple[int, int]]:
    """The (start, end) of each length-delimited field numbered ``wanted`` in the message at ``view[start:end]``, in order
    (a repeated field's items; a message field given twice, which protobuf merges); ValueError where the bytes are not
    protobuf's wire format."""
    found, at = [], start
    while at < end:
        key, at = _varint(view, at, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, at = _varint(view, at, end)
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == 2:
            length, at = _varint(view, at, end)
            if field == wanted:
                found.append((at, at + length))
            at += length
        else:  # groups (3, 4) are not in ONNX's schema; 6, 7 do not exist
            raise ValueError(f"wire type {wire}")
        if at > end or field == 0:
            raise ValueError("truncated")
    return found


def _varint(view: Any, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= end or shift > 63:
            raise ValueError("truncated varint")
        byte = view[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at
