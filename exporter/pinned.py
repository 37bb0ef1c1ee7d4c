"""The inference settings every run pins (``RunConfig.inference_settings`` records them; the
runners and ``model.pinned_threads`` apply them): one inter-op thread everywhere, so a run's speed
and numbers depend on ``--threads`` alone; onnxruntime runs nodes in order, fully optimised.

A leaf module: the runners read it without importing the configuration.
"""

from typing import Any

TORCH_INTEROP_THREADS = 1
ORT_INTER_OP_THREADS = 1
ORT_EXECUTION_MODE = "sequential"  # onnxruntime.ExecutionMode.ORT_SEQUENTIAL
ORT_GRAPH_OPTIMIZATION = "all"  # onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
# the graph optimisation levels a setting may name -> onnxruntime.GraphOptimizationLevel member
ORT_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
ORT_LEVEL_NAMES = tuple(ORT_LEVELS)
# onnxruntime's C++ logger writes to stderr itself, in ANSI colours even into a pipe
# ("\x1b[1;31m... [E:onnxruntime:, sequential_executor.cc:677 ExecuteKernel] Non-zero status code ...\x1b[m"),
# what the exception raised to Python says again. Fatal only: the exception carries the error to the row's reason.
ORT_LOG_SEVERITY = 4


def quiet_onnxruntime() -> Any:
    """``onnxruntime``, its default logger (sessions created by the quantizers and calibrators) at fatal only."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(ORT_LOG_SEVERITY)
    return onnxruntime
