"""Preloaded by the prototype's fork server (benchmarks/isolation_stdlib.py): the build server's warm-up, on import."""

from export_check.builder.server import warm_up

warm_up()
