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
    names: tuple[str, ...]  # model names, in fleet order; each is <name>/model.pth with <name>/export-check.toml
    broken: tuple[str, ...]  # their eager row fails

    def checkpoint(self, name: str) -> Path:
        return self.folder / name / "model.pth"

    def expected(self, name: str) -> str:
        return "fail" if name in self.broken else "pass"


def save_mlp(netdef: Path, hidden: int, seed: int, out: Path) -> None:
    import torch

    from export_check.checkpoint import resolve_factory

    torch.manual_seed(seed)
    torch.save(resolve_factory(f"{netdef}:DigitsMLP")(hidden=hidden).state_dict(), out)


def make_zoo(folder: Path, count: int, broken: tuple[int, ...] = (), kinds: tuple[str, ...] = TWO_KINDS,
             extra: dict[str, str] | None = None, record: bool = True) -> Zoo:
    """``count`` models in ``folder``: ``<name>/model.pth`` with its ``export-check.toml`` (arch, golden,
    inputs, artifacts) and, with ``record``, its golden set recorded by the CLI; ``fleet.toml`` names
    them all. ``extra``: more lines of a model's table in fleet.toml, by name. A broken model without
    ``record`` gets its new weights when its golden set is first recorded (:func:`break_model`)."""
    from export_check.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".git").mkdir(exist_ok=True)  # the zoo is a project (issue 24): its models' settings may name its netdef.py
    netdef = write_netdef(folder)
    write_digit_vectors(folder / "digits", count=12)
    names = tuple(f"mlp{i}" for i in range(count))
    fleet = ["[defaults]", f"artifacts = {json.dumps(list(kinds))}", ""]
    for i, name in enumerate(names):
        hidden = 8 + 4 * i
        (folder / name).mkdir(exist_ok=True)
        save_mlp(netdef, hidden, seed=i, out=folder / name / "model.pth")
        (folder / name / "export-check.toml").write_text(
            # resolved to the path the fleet file's "netdef.py" resolves to: the same cache key
            f'arch = "../netdef.py:DigitsMLP"\narch-kwargs = {{ hidden = {hidden} }}\ngolden = "golden"\ninputs = "../digits"\n'
            f"artifacts = {json.dumps(list(kinds))}\n"
        )
        if record:
            settings = folder / name / "export-check.toml"  # named: the zoo is not the project the tests stand in
            assert main(["golden", "record", str(folder / name / "model.pth"), "--config", str(settings), "-q"]) == 0, name
            if i in broken:  # retrained after its golden set was approved: its eager row fails
                break_model(folder, name)
        fleet += [f"[models.{name}]", f'checkpoint = "{name}/model.pth"', 'arch = "netdef.py:DigitsMLP"',
                  f"arch-kwargs = {{ hidden = {hidden} }}", f'golden = "{name}/golden"', *((extra or {}).get(name, "").splitlines()), ""]
    (folder / "fleet.toml").write_text("\n".join(fleet))
    return Zoo(folder, names, tuple(names[i] for i in broken))


def break_model(folder: Path, name: str) -> None:
    """New weights for model ``name`` (its golden set keeps the old logits)."""
    hidden = 8 + 4 * int(name.removeprefix("mlp"))
    save_mlp(folder / "netdef.py", hidden, seed=100 + hidden, out=folder / name / "model.pth")


KILLER = textwrap.dedent(
    '''
    import os
    import signal
    import time
    from pathlib import Path

    from export_check.checkpoint import resolve_factory

    HERE = Path(__file__).resolve().parent


    def KillOnce(marker: str, hidden: int = 8, always: bool = False, after: str = ""):
        """The user's DigitsMLP, except that its first construction (every one, with always=True) kills
        its own process with SIGKILL: the worker checking this model is lost mid-check, as when a
        node goes down. The marker file records the pid that died. With ``after``, the first death
        waits (up to a minute) for that file: another killer in the same pool has been reached."""
        path = Path(marker)
        if always or not path.exists():
            deadline = time.monotonic() + 60
            while after and not path.exists() and not Path(after).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            with open(path, "a") as fh:
                fh.write(f"{os.getpid()}\\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return resolve_factory(f"{HERE / 'netdef.py'}:DigitsMLP")(hidden=hidden)
    '''
).lstrip()


def add_killer(zoo: Zoo, name: str, always: bool, marker: Path | None = None, after: Path | None = None) -> str:
    """A fleet table for model ``name`` (already in the zoo, golden set recorded) checked through
    ``killer.py:KillOnce``: its worker dies on the first attempt (on every one, with ``always``); with
    ``after``, its first death waits for that marker (the other killer has died: it ran in this pool)."""
    (zoo.folder / "killer.py").write_text(KILLER)
    hidden = 8 + 4 * int(name.removeprefix("mlp"))
    marker = marker or zoo.folder / f"{name}.killed"
    return "\n".join([f"[models.{name}-killed]", f'checkpoint = "{name}/model.pth"', 'arch = "killer.py:KillOnce"',
                      f'arch-kwargs = {{ marker = "{marker}", hidden = {hidden}, always = {str(always).lower()}, after = "{after or ""}" }}',
                      f'golden = "{name}/golden"', ""])
