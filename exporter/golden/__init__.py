"""The golden set: the inputs a model is checked on and the logits approved for them, on disk.

A folder holding ``manifest.json`` (content hashes, the preprocessing, provenance), the inputs
and the reference logits. Every run replays it; it changes only on ``export-check golden``.

- ``manifest``: read and validate a set, check every file's hash (``load_golden``, ``verify_golden``).
- ``goldenset``: the set as read (``GoldenSet``): its inputs decoded and batched, its references, each file read
  within bounds beneath the folder and hash-checked (``read_verified``).
- ``calibration``: the samples the static int8 kinds calibrate on (``CalibrationSplit``).
- ``store``: write a set atomically, content-addressed, and collect the files it no longer names.
- ``reading``: the bounds every golden file is read within; a file the user points at, read within them.
- ``inputs``: those bytes decoded whole (``.npy``, ``.npz``, ``.safetensors``, images), each bound checked where it is parsed.
- ``preprocess``: the ``Preprocess`` spec an image becomes the model's input by, from the manifest or the command line.
- ``batches``: one run's batches, decoded once when they fit in memory, streamed when not.
- ``lifecycle``: ``golden record|verify|approve`` as typed results (the CLI prints them).

Import the module you need; this package imports nothing itself.
"""
