"""What the parent and the build server agree on: the messages on their pipes and a few constants; and what a
file's failure to load where nothing of the architecture is imported (:class:`LoadFailure`) says to the user
(``load_needs``).

Its own module so that neither side imports the other's code to talk to it (client.py and
server.py import this). A message is a pickled dict behind its length (8 bytes, little-endian);
only our own processes write to these pipes, so unpickling them is trusted.

A request (parent -> server), one per build, in build order::

    module, kind      the kind's module (imported by name in the child) and name
    path, source      the artifact's path; the path of the file it derives from, or None
    timeout           seconds the build may run (None: no limit)
    runtimes          the runtimes of every kind the run builds (their heavy loaders are imported once, ahead)
    ctx_key           the run's build context, by key
    ctx               that context pickled: with the first request of a key only
    sys_path, cwd     the parent's, for the child to import and resolve paths as the parent would
    files             lone architecture files the parent imported: module name -> file

A reply (server -> parent), one per request, in request order: ``status`` (``ok``, ``raised``,
``crashed``, ``timeout``, ``unpicklable``, ``source-failed``) and, as it applies, ``details``,
``notes``, ``exception``/``description``, ``signal``/``exit_code``, ``stderr``, ``seconds``, ``pid``,
``load``: the :class:`LoadFailure` of a file that built but did not load in the load host, and ``first``:
the outputs of the file's first golden sample (``first_sample``) as the load host computed them, where
nothing of the architecture is imported (the parent computes them again and compares: observe.py).

The server and its load host (server -> load host, one per built file; the same reply fields)::

    module, path, cwd, timeout   as in a build request (timeout: what is left of the build's)
    ctx_key, ctx                 the build context without its model, pickled (with a key's first request)

or ``{"prepare": [module, ...]}`` (no reply): a runtime's loader to import while a file of it builds.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import re
import struct
from dataclasses import dataclass
from typing import Any

from ..artifacts import PRELOAD as _KINDS_PRELOAD
from ..artifacts.runtimes import RUNTIME_MODULES

ENV_SWITCH = "EXPORT_CHECK_ISOLATE"
# What every child needs is imported once in the server; the rest each child imports itself.
# Imported in this order, one at a time, whenever the server is idle or a child is building: the
# kinds' ``preload`` in build order (artifacts.PRELOAD).
PRELOAD = _KINDS_PRELOAD
# What the load host imports ahead, while idle: the runtimes among the build server's preloads (a runtime
# that no default kind uses is imported by the load child that needs it).
LOAD_PRELOAD = tuple(name for name in PRELOAD if any(name in modules for modules in RUNTIME_MODULES.values()))
PRIVATE_PREFIX = "_export_check_arch_"  # architecture._import_file's names for lone architecture files
STDERR_KEEP = 64 << 10  # bytes of a child's stderr kept


def send(stream: Any, message: dict[str, Any]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def receive(stream: Any) -> dict[str, Any]:
    """One message. The readers whose descriptor is also watched with ``select`` are unbuffered (``buffering=0``): a
    buffered one could hold the next message already, unseen by ``select``, and the wait for it would never end."""
    header = _exactly(stream, 8)
    if len(header) < 8:
        raise EOFError("the build server closed its pipe")
    (size,) = struct.unpack("<Q", header)
    data = _exactly(stream, size)
    if len(data) < size:
        raise EOFError("the build server closed its pipe mid-message")
    return pickle.loads(data)  # our own server's reply: trusted


def _exactly(stream: Any, size: int) -> bytes:
    """``size`` bytes, or fewer at EOF: an unbuffered read may return part of what was asked."""
    chunks, got = [], 0
    while got < size:
        chunk = stream.read(size - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class LoadFailure:
    """A file that built but did not load, or did not run its first sample, in the load host: a process
    that has imported nothing of the user's architecture, as a deployed one has not.

    ``description``: what it raised, one line; ``missing``: the dotted name the file needs and that
    process lacks, and ``how`` it needs it (see :func:`missing_at_load`); both empty when the failure
    names nothing missing.
    """

    description: str
    missing: str = ""
    how: str = ""


# What a load that lacks the architecture's code raises, by how the file needs it: a pytree node type
# (torch.export's output and input structures), a module (pickle, a class lookup by module), a class.
_MISSING = (
    ("pytree", re.compile(r"Deserializing (?P<name>[\w.]+) in pytree is not registered")),
    ("pytree", re.compile(r"(?P<name>[\w.]+) is not a registered serialized type")),
    ("class", re.compile(r"Can't get attribute '(?P<attr>[\w.]+)' on <module '(?P<module>[\w.]+)'")),
    ("module", re.compile(r"No module named '(?P<name>[\w.]+)'")),
)


def missing_at_load(texts: list[str]) -> tuple[str, str]:
    """``(how, dotted name)`` of what a failed load says it lacks, from the exception texts of its chain
    (and what it logged); ``("", "")`` when none of them names a missing module, class or pytree type.

    >>> missing_at_load(["RuntimeError: We ran into an error when deserializing the saved file.",
    ...                  "NotImplementedError: Deserializing transformers.modeling_outputs.SequenceClassifierOutput in pytree is not registered."])
    ('pytree', 'transformers.modeling_outputs.SequenceClassifierOutput')
    >>> missing_at_load(["AttributeError: Can't get attribute 'Head' on <module 'mynet' from '/x/mynet.py'>"])
    ('class', 'mynet.Head')
    >>> missing_at_load(["ValueError: bad magic number"])
    ('', '')
    """
    for how, pattern in _MISSING:
        for text in texts:
            match = pattern.search(text)
            if match is not None:
                found = match.groupdict()
                return how, found["name"] if "name" in found else f"{found['module']}.{found['attr']}"
    return "", ""


def load_needs(filename: str, how: str, missing: str, defined_in: str | None, description: str) -> str:
    """Why a file that loads beside the architecture does not load without it (a deployed process has
    not imported it): what it needs, and the two ways out. ``defined_in``: the file of the module that
    defines ``missing`` in this process, when export-check imported it under a private name.

    >>> text = load_needs("torch-export.pt2", "pytree", "transformers.modeling_outputs.SequenceClassifierOutput", None, "")
    >>> text.split(", and ")[0]
    'torch-export.pt2 needs transformers.modeling_outputs.SequenceClassifierOutput registered as a pytree node to load'
    >>> text.split(": ", 1)[1]
    'import transformers.modeling_outputs in the deployed process before loading the file, or return a tuple or dict from forward'
    """
    module, _, name = missing.rpartition(".")
    if defined_in is not None:  # a lone architecture file: its private module name exists in no other process
        shown = f"{name} (defined in {defined_in}, which export-check imports under the private name {module})"
        fix = f"move {name} into a module the deployed process can import by name and import it there"
    else:
        shown, fix = missing, f"import {module} in the deployed process before loading the file"
    if how == "pytree":
        return (f"{filename} needs {shown} registered as a pytree node to load, and a process that has not imported the "
                f"architecture has not registered it: {fix}, or return a tuple or dict from forward")
    if how == "class":
        return f"{filename} needs class {shown} to load, which a process that has not imported the architecture lacks: {fix}"
    if how == "module":
        return f"{filename} needs module {missing} to load, which a process that has not imported the architecture cannot import: " \
               "install it where the file is deployed, or export without it"
    return f"reloading {filename} in a process that has not imported the architecture failed: {description}"


def first_sample(ctx: Any) -> dict[str, Any] | None:
    """The named inputs of the example batch's first sample (the golden set's first), batch axis kept: what the
    load probe runs through each file built, in the load host, and what the parent runs again through the file it
    reloaded to compare (``observe.clean_process_difference``). None without an example."""
    from collections.abc import Mapping

    from ..artifacts.base import INPUT

    example = getattr(ctx, "example", None)
    if example is None:
        return None
    if isinstance(example, Mapping):
        axes = {spec.name: spec.batch_axis for spec in getattr(getattr(ctx, "signature", None), "inputs", ())}
        return {name: value.narrow(axes.get(name, 0), 0, 1).numpy() for name, value in example.items()}
    return {INPUT: example[:1].numpy()}


@contextlib.contextmanager
def logged_exceptions() -> Any:
    """The exceptions attached to log records while the block runs (``log.warning(..., exc_info=True)``),
    as text: torch.export.load logs the cause of a failed load (the pytree type not registered) and
    raises a vaguer error, through the "torch.export" logger's own handler, which does not propagate
    and may not exist before the load imports it. So every record is seen where it is made
    (``Logger.handle``); this runs in a load child, which exits after it."""
    texts: list[str] = []
    real = logging.Logger.handle

    def handle(self: logging.Logger, record: logging.LogRecord) -> Any:
        if record.exc_info and record.exc_info[1] is not None:
            texts.extend(chain_texts(record.exc_info[1]))
        return real(self, record)

    logging.Logger.handle = handle  # type: ignore[method-assign]
    try:
        yield texts
    finally:
        logging.Logger.handle = real  # type: ignore[method-assign]


def chain_texts(exc: BaseException) -> list[str]:
    """``TypeName: message`` of ``exc`` and of every exception it was raised from or during, innermost first."""
    texts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts.insert(0, f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return texts
