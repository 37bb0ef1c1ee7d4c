"""``export-check golden record|verify|approve`` on a generative golden set: what they print (the CLI's hook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import goldenset

EXIT_PASS, EXIT_FAIL = 0, 1


def verify(golden_dir: Path) -> tuple[bool, list[str]]:
    return goldenset.verify_lines(Path(golden_dir))


def golden_command(command: str, common: dict[str, Any], inputs: Path | None, force: bool, dry_run: bool) -> int | None:
    """The exit code of ``golden record`` from a prompt folder or ``golden approve`` on a generative set; None: not one."""
    from . import lifecycle

    golden_dir, model = Path(common["golden_dir"]), {"arch_kwargs": common["arch_kwargs"], "arch_root": common["arch_root"]}
    if command == "record" and inputs is not None and goldenset.is_prompt_folder(Path(inputs)):
        recorded = lifecycle.record(Path(common["checkpoint"]), common["arch"], Path(inputs), golden_dir, force, **model)
        print(f"recorded {len(recorded)} prompts, each with its greedy continuation of {recorded.new_tokens} tokens and the "
              f"teacher-forced logits, into {golden_dir}")
        return EXIT_PASS
    if command == "approve" and goldenset.is_generative(golden_dir):
        diff, written = lifecycle.approve(Path(common["checkpoint"]), common["arch"], golden_dir, dry_run, **model)
        print("\n".join(diff.lines()))
        if dry_run:
            print("dry run: golden set unchanged")
        elif written:
            print(f"approved: {golden_dir} now holds the continuations and logits of {common['checkpoint']}")
        else:
            print(f"nothing to approve: {golden_dir} already holds exactly the continuations and logits of {common['checkpoint']}")
        return EXIT_PASS
    return None
