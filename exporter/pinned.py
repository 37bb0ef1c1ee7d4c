"""The inference settings every run pins (``RunConfig.inference_settings`` records them; the
runners and ``model.pinned_threads`` apply them): one inter-op thread everywhere, so a run's speed
and numbers depend on ``--threads`` alone; onnxruntime runs nodes in order, fully optimised.

A leaf module: the runners read it without importing the configuration.
"""

TORCH_INTEROP_THREADS = 1
ORT_INTER_OP_THREADS = 1
ORT_EXECUTION_MODE = "sequential"  # onnxruntime.ExecutionMode.ORT_SEQUENTIAL
ORT_GRAPH_OPTIMIZATION = "all"  # onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
# the graph optimisation levels a setting may name -> onnxruntime.GraphOptimizationLevel member
ORT_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
ORT_LEVEL_NAMES = tuple(ORT_LEVELS)
