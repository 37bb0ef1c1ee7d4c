"""What the parent and the build server agree on: the messages on their pipes and a few constants.

Its own module so that neither side imports the other's code to talk to it (client.py and
server.py import this). A message is a pickled dict behind its length (8 bytes, little-endian);
only our own processes write to these pipes, so unpickling them is trusted.

A request (parent -> server), one per build, in build order::

    module, kind      the kind's module (imported by name in the child) and name
    path, source      the artifact's path; the path of the file it derives from, or None
    timeout           seconds the build may run (None: no limit)
    ctx_key           the run's build context, by key
    ctx               that context pickled: with the first request of a key only
    sys_path, cwd     the parent's, for the child to import and resolve paths as the parent would
    files             lone architecture files the parent imported: module name -> file

A reply (server -> parent), one per request, in request order: ``status`` (``ok``, ``raised``,
``crashed``, ``timeout``, ``unpicklable``, ``source-failed``) and, as it applies, ``details``,
``notes``, ``exception``/``description``, ``signal``/``exit_code``, ``stderr``, ``seconds``, ``pid``.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

from ..artifacts import PRELOAD as _KINDS_PRELOAD

ENV_SWITCH = "EXPORT_CHECK_ISOLATE"
# What every child needs is imported once in the server; the rest each child imports itself.
# Imported in this order, one at a time, whenever the server is idle or a child is building: the
# kinds' ``preload`` in build order (artifacts.PRELOAD).
PRELOAD = _KINDS_PRELOAD
PRIVATE_PREFIX = "_export_check_arch_"  # checkpoint._import_file's names for lone architecture files
STDERR_KEEP = 64 << 10  # bytes of a child's stderr kept


def send(stream: Any, message: dict[str, Any]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def receive(stream: Any) -> dict[str, Any]:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError("the build server closed its pipe")
    (size,) = struct.unpack("<Q", header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the build server closed its pipe mid-message")
    return pickle.loads(data)  # our own server's reply: trusted
