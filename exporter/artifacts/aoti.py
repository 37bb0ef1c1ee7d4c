"""aoti: an AOTInductor package, ``torch._inductor.aoti_compile_and_package`` of the ``torch.export``
program (batch and declared axes dynamic), reloaded with ``torch._inductor.aoti_load_package``.

Opt-in (``--artifacts all`` or ``aoti``): Inductor compiles the model to C++, 11-18 s on the bundled
models. Without a C++ compiler the row is ``not applicable`` and says how to install one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ._common import TorchModuleRunner, atomic_path
from ._program import export_program
from .base import BuildContext, NotApplicable

ACCOUNTS = {"aoti": "an AOTInductor package: `torch._inductor.aoti_compile_and_package` of the `torch.export` program, loaded with "
                    "`aoti_load_package`; **not applicable**, saying how to install one, without a C++ compiler (`$CXX`, else `g++`, `c++`, "
                    "`clang++` on `PATH`)"}

COMPILERS = ("g++", "c++", "clang++")  # what Inductor's C++ builder finds when CXX is not set


def find_compiler() -> str | None:
    """The C++ compiler Inductor would use: ``$CXX`` when set, else the first of COMPILERS on PATH."""
    wanted = os.environ.get("CXX", "").strip()
    if wanted:
        return shutil.which(wanted)
    return next((found for name in COMPILERS if (found := shutil.which(name))), None)


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch

    compiler = find_compiler()
    if compiler is None:
        cxx = os.environ.get("CXX", "").strip()
        looked = f"CXX={cxx} is not on PATH" if cxx else f"none of {', '.join(COMPILERS)} is on PATH"
        raise NotApplicable(f"not applicable: AOTInductor compiles the model to C++ and no C++ compiler was found ({looked}); "
                            "install one (Debian/Ubuntu: apt-get install g++; Fedora: dnf install gcc-c++; conda: conda install gxx) "
                            "or set CXX to its path")
    # The package runs the compiled graph; it does not enforce .module()'s guards (nn.LSTM's pinned time
    # steps), and the replay judges it at every size the golden set holds.
    program = export_program(ctx, check_guards=False)
    with atomic_path(path) as tmp:
        torch._inductor.aoti_compile_and_package(program, package_path=str(tmp))
    return {"compiler": compiler}


class AotiRunner(TorchModuleRunner):
    """An AOTInductor package reloaded with ``aoti_load_package`` (it runs without Python-side graph code)."""

    def load(self, path: Path) -> Any:
        import torch

        return torch._inductor.aoti_load_package(str(path))


def open_runner(path: Path, ctx: BuildContext) -> AotiRunner:
    return AotiRunner(path, ctx.signature)
