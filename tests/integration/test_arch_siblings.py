"""A file-path arch imports its sibling modules as `python badnet.py` would (issue 16.10), while a
sibling named like an installed library or a standard-library module never stands in for it: the
file's folder goes at the end of sys.path. (The CLI run of a sibling import is test_process_attacks.py's.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO


def test_siblings_import_and_never_shadow_installed_or_standard_modules(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "mynet.py").write_text((REPO / "models" / "resnet.py").read_text())
    for shadow in ("numpy", "torch", "json"):  # installed libraries and the standard library
        (sub / f"{shadow}.py").write_text(f"open({str(tmp_path / ('SHADOWED-' + shadow))!r}, 'w').close()\nraise ImportError('fake')\n")
    (sub / "badnet.py").write_text("import json\nimport numpy\nimport torch\nfrom mynet import ResNet\n\n\nclass Net(ResNet):\n"
                                   "    version = numpy.__version__\n")
    code = ("import sys; from export_check.checkpoint import resolve_factory; f = resolve_factory(sys.argv[1]); "
            "import numpy, json; print(f.__name__, f.__mro__[1].__module__, numpy.__file__, json.__file__)")
    result = subprocess.run([sys.executable, "-c", code, f"{sub / 'badnet.py'}:Net"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    name, base_module, numpy_file, json_file = result.stdout.split()
    assert name == "Net" and base_module == "mynet"  # the sibling was imported
    assert str(sub) not in numpy_file and str(sub) not in json_file  # the real libraries
    assert sorted(p.name for p in tmp_path.glob("SHADOWED-*")) == []
