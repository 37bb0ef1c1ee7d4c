"""export-check: export a PyTorch model to every deployable artifact and gate each on a golden set."""

__version__ = "0.1.0"
