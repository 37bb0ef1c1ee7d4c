"""An artifact builder for tests/integration/test_jobs.py that never finishes on its own: it writes its pid
beside the artifact's path and sleeps, so a test can stop a run while this build is in flight."""

from __future__ import annotations

import os
import time
from pathlib import Path


def build(ctx, path: Path, source: Path | None) -> dict[str, str]:
    Path(f"{path}.pid").write_text(str(os.getpid()))
    time.sleep(600)
    return {}
