"""Fleet parsing, shards and merge input: every bad input is one UsageError line, never a traceback."""

from __future__ import annotations

import hashlib
import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.errors import UsageError
from export_check.fleet.spec import Fleet, FleetModel, from_checkpoints, parse_fleet, parse_shard, select_shard, shard_index


@given(st.text(max_size=12))
def test_parse_shard_accepts_exactly_i_of_n(text: str) -> None:
    parts = text.strip().split("/")
    valid = (len(parts) == 2 and all(p.strip().isdigit() and p.strip().isascii() for p in parts)
             and 1 <= int(parts[0]) <= int(parts[1]))
    if valid:
        assert parse_shard(text) == (int(parts[0]), int(parts[1]))
    else:
        with pytest.raises(UsageError, match=r"--shard must be I/N"):
            parse_shard(text)


def test_shards_partition_the_fleet_stably_by_the_sha256_of_the_name() -> None:
    names = [f"model-{i}" for i in range(40)]
    fleet = Fleet(models=tuple(FleetModel(name=n, checkpoint=Path(f"{n}.pth")) for n in names))
    shards = [select_shard(fleet, (i, 3)) for i in (1, 2, 3)]
    assert sorted(m.name for s in shards for m in s) == sorted(names)  # each model in exactly one shard
    assert all(s for s in shards)
    # the assignment is the name's sha256 mod N, computed here independently: the same on every machine
    for i, shard in enumerate(shards):
        assert all(int(hashlib.sha256(m.name.encode()).hexdigest(), 16) % 3 == i for m in shard)
    # adding a model moves no other
    bigger = Fleet(models=(*fleet.models, FleetModel(name="new", checkpoint=Path("new.pth"))))
    assert [m.name for m in select_shard(bigger, (2, 3)) if m.name != "new"] == [m.name for m in shards[1]]
    assert shard_index("resnet-digits", 1) == 0


TOML_VALUES = st.one_of(st.integers(-3, 3), st.text(string.ascii_letters + "./:", max_size=8), st.booleans(),
                        st.lists(st.text(string.ascii_letters, max_size=4), max_size=2), st.floats(allow_nan=False, width=32))
KEYS = st.sampled_from(["checkpoint", "arch", "golden", "batch-size", "artifacts", "max-mae", "num-cpus", "resources", "jobs",
                        "config", "out", "nonsense", "inputs", "threads"])


def _toml(value: object) -> str:
    return json.dumps(value)  # JSON scalars and lists are TOML too


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(string.ascii_lowercase, min_size=1, max_size=5), st.dictionaries(KEYS, TOML_VALUES, max_size=5), max_size=3))
def test_any_fleet_file_parses_or_fails_with_one_line(tmp_path_factory: pytest.TempPathFactory, models: dict) -> None:
    folder = tmp_path_factory.mktemp("fleet")
    (folder / "a.pth").write_bytes(b"x")
    lines = []
    for name, table in models.items():
        lines.append(f"[models.{name}]")
        lines += [f"{key} = {_toml(value)}" for key, value in table.items()]
    path = folder / "fleet.toml"
    path.write_text("\n".join(lines) + "\n")
    try:
        fleet = parse_fleet(path)
    except UsageError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
        return
    assert [m.name for m in fleet.models] == list(models)
    assert all(m.checkpoint.is_absolute() for m in fleet.models)


def test_a_tilde_path_of_an_unknown_user_is_a_plain_path_not_a_crash() -> None:
    # Path.expanduser raises RuntimeError for "~nosuchuser"; the fuzzer found it on the command line
    fleet = from_checkpoints([Path("~0no-such-user/model.pth")])
    assert fleet.models[0].checkpoint == Path("~0no-such-user/model.pth")
