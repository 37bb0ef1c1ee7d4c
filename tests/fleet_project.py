"""A model zoo for fleet, shard, Ray and pytest-xdist tests: small real models with their own golden sets.

Each model is the user's ``DigitsMLP`` (tests/user_project.py's netdef.py; 64-float digit vectors in,
10 logits out) at its own width and seed, with a golden set recorded from real test-split digits by
the CLI. ``broken`` models get new weights after their golden set was recorded, so their eager row
fails (the artifacts still match eager): a real regression, not a stub.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

from user_project import write_digit_vectors, write_netdef

TWO_KINDS = ("torchscript-trace", "onnx")


@dataclass(frozen=True)
class Zoo:
    folder: Path
    names: tuple[str, ...]  # model names, in fleet order; each has <name>.pth and golden-<name>/
    broken: tuple[str, ...]  # their eager row fails

    def checkpoint(self, name: str) -> Path:
        return self.folder / f"{name}.pth"

    def expected(self, name: str) -> str:
        return "fail" if name in self.broken else "pass"


def _save_mlp(netdef: Path, hidden: int, seed: int, out: Path) -> None:
    import torch

    from exporter.checkpoint import resolve_factory

    torch.manual_seed(seed)
    torch.save(resolve_factory(f"{netdef}:DigitsMLP")(hidden=hidden).state_dict(), out)


def make_zoo(folder: Path, count: int, broken: tuple[int, ...] = (), kinds: tuple[str, ...] = TWO_KINDS,
             extra: dict[str, str] | None = None) -> Zoo:
    """``count`` models in ``folder`` with golden sets, one export-check.toml each (arch, golden, artifacts),
    and ``fleet.toml`` naming them all. ``extra``: more lines of a model's table in fleet.toml, by name."""
    from exporter.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    netdef = write_netdef(folder)
    write_digit_vectors(folder / "digits", count=12)
    names = tuple(f"mlp{i}" for i in range(count))
    fleet = ["[defaults]", f"artifacts = {json.dumps(list(kinds))}", ""]
    for i, name in enumerate(names):
        hidden = 8 + 4 * i
        _save_mlp(netdef, hidden, seed=i, out=folder / f"{name}.pth")
        arch_kwargs = json.dumps({"hidden": hidden})
        code = main(["golden", "record", str(folder / f"{name}.pth"), "--arch", f"{netdef}:DigitsMLP", "--arch-kwargs", arch_kwargs,
                     "--inputs", str(folder / "digits"), "--golden", str(folder / f"golden-{name}"), "-q"])
        assert code == 0, name
        if i in broken:  # retrained after the golden set was approved: its eager row fails
            _save_mlp(netdef, hidden, seed=100 + i, out=folder / f"{name}.pth")
        fleet += [f"[models.{name}]", f'checkpoint = "{name}.pth"', 'arch = "netdef.py:DigitsMLP"', f"arch-kwargs = {{ hidden = {hidden} }}",
                  f'golden = "golden-{name}"', *((extra or {}).get(name, "").splitlines()), ""]
    (folder / "fleet.toml").write_text("\n".join(fleet))
    return Zoo(folder, names, tuple(names[i] for i in broken))


KILL_ONCE = textwrap.dedent(
    '''
    import os
    import signal
    from pathlib import Path

    from netdef import DigitsMLP


    def KillOnce(marker: str, hidden: int = 8, always: bool = False):
        """DigitsMLP, but the first construction (every one, with always=True) kills its own process
        with SIGKILL: the worker checking this model is lost mid-check, as a node going down is."""
        path = Path(marker)
        if always or not path.exists():
            path.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return DigitsMLP(hidden=hidden)
    '''
).lstrip()


def write_kill_arch(folder: Path) -> Path:
    path = folder / "killer.py"
    path.write_text(KILL_ONCE)
    return path
