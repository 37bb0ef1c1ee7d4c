"""The artifact cache, on real runs of the bundled ResNet over the bundled 64 real digits (two kinds)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN
from export_check.builder import builds
from export_check.cache.key import arch_source_sha256
from export_check.cache.runs import open_cache
from export_check.cache.secret import CacheKey
from export_check.cache.store import EAGER, ArtifactCache
from export_check.cli import main
from export_check.config import RunConfig
from export_check.files import sha256_file
from export_check.gates import Gate, Thresholds
from export_check.run import pipeline
from export_check.settings import parse_settings

KINDS = ("torchscript-trace", "onnx")


def config_for(tmp_path: Path, cache: Path | None, **changes) -> RunConfig:
    base = RunConfig(
        checkpoint=DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN, out_dir=tmp_path / "out", kinds=KINDS, cache_dir=cache
    )
    return dataclasses.replace(base, **changes)


@pytest.fixture()
def build_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the artifacts the pipeline really builds (the cache must keep this empty on a hit)."""
    calls: list[str] = []
    real = builds.start_build

    def counting(kind, *args, **kwargs):
        calls.append(kind.name)
        return real(kind, *args, **kwargs)

    monkeypatch.setattr(builds, "start_build", counting)
    return calls


def cache_states(report) -> dict[str, str | None]:
    return {row.name: row.cache for row in report.rows}


def numbers(report, with_files: bool = True) -> list[tuple]:
    # A rebuilt TorchScript file is not byte-identical to the first build (its zip records differ);
    # its metrics are.
    return [(row.name, row.status, row.metrics, row.reasons, row.artifact.sha256 if row.artifact and with_files else None)
            for row in report.rows]


def diagnostics(report) -> list:
    return [getattr(row, "diagnostics", None) for row in report.rows]


def test_cold_then_warm_builds_nothing_and_gives_identical_metrics(tmp_path: Path, build_calls: list[str]) -> None:
    config = config_for(tmp_path, tmp_path / "cache")
    cold = pipeline.run_check(config)
    assert build_calls == list(KINDS)
    assert cache_states(cold) == {"eager": "miss", "torchscript-trace": "miss", "onnx": "miss"}
    assert cold.passed and cold.row("onnx").metrics.images == 64 and 0 < cold.row("onnx").metrics.mae < 1e-5

    for name in KINDS:  # the warm run must restore the files the user ships, not only the verdicts
        (tmp_path / "out" / f"{name}{'.onnx' if name == 'onnx' else '.pt'}").unlink()
    warm = pipeline.run_check(config)
    assert build_calls == list(KINDS), "a warm run built an artifact"
    assert set(cache_states(warm).values()) == {"hit"}
    assert numbers(warm) == numbers(cold)
    assert diagnostics(warm) == diagnostics(cold)  # measured once, reused as they were
    assert any(d is not None for d in diagnostics(cold))
    assert warm.golden.label_accuracy == cold.golden.label_accuracy == 1.0
    for row in warm.rows[1:]:
        assert row.build_seconds is None and row.replay_seconds is None
        assert sha256_file(Path(row.artifact.path)) == row.artifact.sha256
    assert dict(warm.timings).keys() == {"verify_inputs", "cache_lookup"}
    assert json.loads(json.dumps(warm.to_json()))["rows"][1]["cache"] == "hit"


def test_other_thresholds_reuse_the_artifacts_and_judge_afresh(tmp_path: Path, build_calls: list[str]) -> None:
    # Thresholds are not in the key: the files are reused. The diagnostics measure with the gates
    # (exporter/diagnostics), so the rows are replayed and judged again rather than served whole.
    config = config_for(tmp_path, tmp_path / "cache")
    assert pipeline.run_check(config).passed
    strict = dataclasses.replace(config, thresholds=Thresholds().with_gates(float=Gate(max_mae=1e-9), eager=Gate(max_mae=1e-5)))
    report = pipeline.run_check(strict)
    assert build_calls == list(KINDS)
    assert cache_states(report) == {"eager": "miss", "torchscript-trace": "artifact", "onnx": "artifact"}
    assert report.row("onnx").status == "fail" and "MAE" in report.row("onnx").reasons[0]
    assert report.row("torchscript-trace").status == "pass"  # bit-exact: MAE 0 passes even 1e-9
    again = pipeline.run_check(strict)  # and now those thresholds' verdicts are cached too
    assert set(cache_states(again).values()) == {"hit"} and numbers(again) == numbers(report)


def test_changed_checkpoint_misses(tmp_path: Path, build_calls: list[str]) -> None:
    import torch

    pipeline.run_check(config_for(tmp_path, tmp_path / "cache"))
    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    name = next(k for k, v in state.items() if v.dtype == torch.float32 and v.ndim == 4)
    state[name] = state[name] * 1.5
    changed = tmp_path / "changed.pth"
    torch.save(state, changed)
    report = pipeline.run_check(config_for(tmp_path, tmp_path / "cache", checkpoint=changed))
    assert build_calls == [*KINDS, *KINDS]
    assert set(cache_states(report).values()) == {"miss"}
    assert report.row("eager").status == "fail"  # other weights: the golden reference no longer matches


def test_damaged_entries_are_detected_and_rebuilt(tmp_path: Path, build_calls: list[str]) -> None:
    config = config_for(tmp_path, tmp_path / "cache")
    cold = pipeline.run_check(config)
    cache = open_cache(config, cold.checkpoint.sha256, cold.golden.manifest_sha256)
    onnx_entry = cache.entry_dir("onnx")
    (artifact,) = [p for p in onnx_entry.iterdir() if p.suffix == ".onnx"]
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    artifact.write_bytes(bytes(data))
    (cache.entry_dir("torchscript-trace") / "meta.json").write_text("{not json")

    report = pipeline.run_check(config)
    assert build_calls == [*KINDS, *KINDS]
    assert cache_states(report) == {"eager": "miss", "torchscript-trace": "rebuilt", "onnx": "rebuilt"}
    assert any("damaged" in note and "changed (sha256" in note for note in report.row("onnx").notes)
    # a meta.json that is not sealed with this user's key is not theirs, whatever it holds
    assert any("cache entry not written by this user's export-check: rebuilt (meta.json carries no MAC" in note
               for note in report.row("torchscript-trace").notes)
    assert numbers(report, with_files=False) == numbers(cold, with_files=False)

    # Truncated: caught by size before hashing; after the rebuild the next run is a clean hit again.
    (artifact,) = [p for p in cache.entry_dir("onnx").iterdir() if p.suffix == ".onnx"]
    artifact.write_bytes(artifact.read_bytes()[:100])
    again = pipeline.run_check(config)
    assert cache_states(again)["onnx"] == "rebuilt" and cache_states(again)["torchscript-trace"] == "artifact"
    assert any("truncated" in note for note in again.row("onnx").notes)
    assert set(cache_states(pipeline.run_check(config)).values()) == {"hit"}
    assert build_calls == [*KINDS, *KINDS, "onnx"]


def test_no_cache_flag_bypasses_it_and_the_default_honours_xdg(tmp_path: Path, private_cache_dir: Path, build_calls, capsys) -> None:
    common = ["check", str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN),
              "--out", str(tmp_path / "out"), "--artifacts", ",".join(KINDS), "-q"]
    assert main([*common, "--json", str(tmp_path / "first.json")]) == 0
    assert private_cache_dir.is_dir() and list(private_cache_dir.rglob("meta.json"))
    entries = sorted(private_cache_dir.rglob("*"))

    assert main([*common, "--no-cache", "--json", str(tmp_path / "bypass.json")]) == 0
    bypass = json.loads((tmp_path / "bypass.json").read_text())
    assert [row["cache"] for row in bypass["rows"]] == [None, None, None]
    assert bypass["settings"]["cache_dir"] is None
    assert sorted(private_cache_dir.rglob("*")) == entries  # neither read nor written
    assert build_calls == [*KINDS, *KINDS]

    assert main([*common, "--json", str(tmp_path / "warm.json")]) == 0
    warm = json.loads((tmp_path / "warm.json").read_text())
    assert [row["cache"] for row in warm["rows"]] == ["hit"] * 3
    assert "every row reused from the artifact cache" in capsys.readouterr().out
    assert build_calls == [*KINDS, *KINDS]


def test_an_edited_local_module_the_architecture_imports_is_a_miss(tmp_path: Path, build_calls: list[str]) -> None:
    package = tmp_path / "ec_cache_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text("from models.resnet import ResNet as Base\n")
    (package / "net.py").write_text("from .helper import Base\n\n\nclass Net(Base):\n    pass\n")
    config = config_for(tmp_path, tmp_path / "cache", arch=f"{package / 'net.py'}:Net", kinds=("onnx",))
    assert pipeline.run_check(config).passed
    assert set(cache_states(pipeline.run_check(config)).values()) == {"hit"}
    with open(package / "helper.py", "a") as fh:
        fh.write("# edited: the architecture file itself is unchanged\n")
    report = pipeline.run_check(config)
    assert build_calls == ["onnx", "onnx"]
    assert cache_states(report) == {"eager": "miss", "onnx": "miss"}
    assert any("helper.py changed since the cached entry was stored" in note for note in report.row("onnx").notes)


def test_a_warm_hit_imports_no_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private_cache_dir: Path) -> None:
    import subprocess
    import sys

    from conftest import REPO

    monkeypatch.chdir(REPO)  # a module-form spec, resolved from the current directory
    argv = ["check", str(DEFAULT_CHECKPOINT), "--arch", "models.resnet:ResNet", "--golden", str(DEFAULT_GOLDEN),
            "--out", str(tmp_path / "out"), "--artifacts", ",".join(KINDS), "-q", "--json", str(tmp_path / "r.json")]
    code = (
        "import sys\nfrom export_check.cli import main\n"
        f"code = main({argv!r})\n"
        "print(code, sorted(m for m in ('torch', 'onnx', 'onnxruntime') if m in sys.modules))\n"
    )
    # Both runs in fresh processes, as CI runs them (the cold one stores, the warm one must hit): the
    # test process's own modules would otherwise be recorded as the entry's local sources.
    cold = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert cold.returncode == 0 and cold.stdout.strip().splitlines()[-1].startswith("0 "), cold.stderr
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0 []"
    assert [row["cache"] for row in json.loads((tmp_path / "r.json").read_text())["rows"]] == ["hit"] * 3


def test_inference_runs_with_the_pinned_settings_the_report_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only does the report say which threads and session options were used: every eager inference of the run
    sees those torch thread counts, and so does each file's replay child (builder/clean.py), where every onnxruntime
    session the replay opens really has those options (read back there, from the session, not from what was asked)."""
    import onnxruntime as ort
    import torch

    from export_check.builder.clean import CleanRunner
    from export_check.model import EagerRunner

    threads = 1 if torch.get_num_threads() != 1 else 2  # not the process default, so an unpinned run shows
    outside = torch.get_num_threads()
    torch_seen: list[tuple[str, int, int]] = []
    sessions: list[dict] = []

    def recording_infer(real, label):
        def infer(self, feeds):
            torch_seen.append((label, torch.get_num_threads(), torch.get_num_interop_threads()))
            return real(self, feeds)
        return infer

    modes = {ort.ExecutionMode.ORT_SEQUENTIAL: "sequential", ort.ExecutionMode.ORT_PARALLEL: "parallel"}
    levels = {ort.GraphOptimizationLevel.ORT_ENABLE_ALL: "all", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED: "extended",
              ort.GraphOptimizationLevel.ORT_ENABLE_BASIC: "basic", ort.GraphOptimizationLevel.ORT_DISABLE_ALL: "disabled"}
    real_session = ort.InferenceSession

    def recording_session(*args, **kwargs):
        session = real_session(*args, **kwargs)
        used = session.get_session_options()
        sessions.append({
            "intra_op_num_threads": used.intra_op_num_threads, "inter_op_num_threads": used.inter_op_num_threads,
            "execution_mode": modes.get(used.execution_mode, str(used.execution_mode)),
            "graph_optimization_level": levels.get(used.graph_optimization_level, str(used.graph_optimization_level)),
            "providers": session.get_providers(),
        })
        return session

    # every file is replayed in a replay child (builder/clean.py): what its runtime uses there, read back there
    replayed: list[dict] = []
    real_init = CleanRunner.__init__

    def recording_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        replayed.append({"kind": Path(args[3]).stem, **self.settings_in_use})

    monkeypatch.setattr(CleanRunner, "__init__", recording_init)
    monkeypatch.setattr(EagerRunner, "infer", recording_infer(EagerRunner.infer, "eager"))
    monkeypatch.setattr(ort, "InferenceSession", recording_session)
    report = pipeline.run_check(config_for(tmp_path, None, threads=threads))
    assert report.passed and all(row.cache is None for row in report.rows)

    inference = dict(report.settings)["inference"]
    assert inference["torch_threads"] == threads and inference["torch_interop_threads"] == 1
    assert inference["onnxruntime"] == {
        "intra_op_num_threads": threads, "inter_op_num_threads": 1, "execution_mode": "sequential",
        "graph_optimization_level": "all", "providers": ["CPUExecutionProvider"],
    }
    # the replay, the batch-size runs, the rerun and the latency of eager here; those of every file in its replay child
    assert {label for label, _, _ in torch_seen} == {"eager"}
    assert {(n, i) for _, n, i in torch_seen} == {(inference["torch_threads"], inference["torch_interop_threads"])}
    assert torch.get_num_threads() == outside  # and the pin is undone after the run
    assert {r["kind"] for r in replayed} == {row.name for row in report.rows if row.name != "eager"}, replayed
    for used in replayed:  # torch where the file needs it; an ONNX file's process holds onnxruntime alone, as deployed
        if "torch" in used["imported"]:
            assert (used["torch_threads"], used["torch_interop_threads"]) == (threads, 1), used
        else:
            assert used["imported"] == ["onnxruntime"] and "onnxruntime" in used, used
    names = {"ORT_SEQUENTIAL": "sequential", "ORT_PARALLEL": "parallel", "ORT_ENABLE_ALL": "all", "ORT_ENABLE_EXTENDED": "extended",
             "ORT_ENABLE_BASIC": "basic", "ORT_DISABLE_ALL": "disabled"}
    in_child = [{k: names.get(v, v) if isinstance(v, str) else v for k, v in r["onnxruntime"].items()} for r in replayed if "onnxruntime" in r]
    assert in_child and all(used == inference["onnxruntime"] for used in in_child), in_child
    # a session this process opens (none for this run's rows, perhaps a diagnostic's) has them too
    assert all(used == inference["onnxruntime"] for used in sessions), sessions


def test_key_covers_arch_source_and_settings_but_not_thresholds(tmp_path: Path) -> None:
    arch_file = tmp_path / "net.py"
    arch_file.write_text("X = 1\n")
    before = arch_source_sha256(f"{arch_file}:Net")
    arch_file.write_text("X = 2\n")
    assert arch_source_sha256(f"{arch_file}:Net") != before
    assert arch_source_sha256("models.resnet:ResNet") == sha256_file(Path(DEFAULT_ARCH.rpartition(":")[0]))

    base = config_for(tmp_path, tmp_path / "cache")

    def key(config: RunConfig) -> str:
        return open_cache(config, "c" * 64, "g" * 64).run_key

    assert key(base) == key(dataclasses.replace(base, thresholds=Thresholds().with_gates(float=Gate(max_mae=1.0))))
    assert key(base) == key(dataclasses.replace(base, out_dir=tmp_path / "elsewhere", kinds=("onnx",)))
    for change in ({"opset": 18}, {"batch_size": 8}, {"threads": 2}, {"arch_kwargs": {"num_classes": 10}}):
        assert key(dataclasses.replace(base, **change)) != key(base), change
    assert open_cache(base, "d" * 64, "g" * 64).run_key != key(base)
    assert open_cache(base, "c" * 64, "h" * 64).run_key != key(base)


def test_cache_dir_setting_is_a_path_relative_to_the_settings_file() -> None:
    parsed = parse_settings({"arch": "m.py:Net", "cache-dir": ".cache/ec"}, Path("/proj"), "pyproject.toml")
    assert parsed["cache_dir"] == Path("/proj/.cache/ec")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(meta=st.binary(max_size=300) | st.dictionaries(
    st.sampled_from(["format", "name", "run_key", "artifact", "metrics"]),
    st.none() | st.integers() | st.text(max_size=8) | st.lists(st.integers(), max_size=3),
))
def test_any_damaged_meta_is_a_miss_never_a_crash(tmp_path_factory: pytest.TempPathFactory, meta) -> None:
    cache = ArtifactCache(tmp_path_factory.mktemp("fuzz"), {"k": 1}, CacheKey(Path("k"), b"k" * 32))
    folder = cache.entry_dir(EAGER)
    folder.mkdir(parents=True)
    data = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    (folder / "meta.json").write_bytes(data)
    assert cache.lookup(EAGER) is None
    assert EAGER in cache.untrusted  # not sealed: not this user's export-check's
    assert (folder / "meta.json").read_bytes() == data  # and left alone, not deleted
