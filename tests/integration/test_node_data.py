"""Issue 30.5: the per-layer errors the tool measures, written as Model Explorer node data for the ONNX
graph (one value per node: its module's error), linked from the views; and the HTML trade-off chart."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import onnx
import pytest

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, read_report
from export_check.cli import main


@pytest.fixture(scope="module")
def failing(tmp_path_factory) -> Path:
    """A check whose onnx row fails (MAE gate 1e-9: its float kernels differ from eager's on any CPU), so it gets
    the divergence table; --diagnose gives the int8 row its SQNR table."""
    tmp = tmp_path_factory.mktemp("node-data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(tmp / "key"))
        code = main([str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx,onnx-int8-dynamic", "-q", "--no-cache",
                     "--out", str(tmp / "out"), "--max-mae", "1e-9", "--diagnose", "--json", str(tmp / "r.json"), "--html", str(tmp / "r.html")])
    assert code == 1
    return tmp


@pytest.fixture(autouse=True)
def module_key(failing: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(failing / "key"))  # the key that sealed r.json


def _report(tmp: Path) -> dict:
    return read_report(tmp / "r.json")


def _owner(node: str, modules: set[str]) -> str | None:
    """The innermost table module a TorchScript-exporter node name is scoped in, read off the name by hand."""
    parts = node.strip("/").split("/")[:-1]  # "/layers/layers.2/conv1/Conv" -> layers, layers.2, conv1
    path, found = "", None
    for part in parts:
        path = part if not path else (path + part[len(path.rsplit(".", 1)[-1]):] if part.startswith(path.rsplit(".", 1)[-1] + ".")
                                      else f"{path}.{part}")
        if path in modules:
            found = path
    return found if found is not None else ("" if "" in modules else None)


@pytest.mark.parametrize("row, value", [("onnx", "mae"), ("onnx-int8-dynamic", "sqnr_db")])
def test_each_node_gets_the_error_of_its_module(failing: Path, row: str, value: str) -> None:
    report = _report(failing)
    path = Path(report["node_data"][row])
    assert path == failing / "out" / f"{row}.node-data.json"
    data = json.loads(path.read_text())
    graph = onnx.load(str(failing / "out" / f"{row}.onnx")).graph
    ((graph_id, node_data),) = data.items()
    assert graph_id == graph.name  # the ONNX adapter's graph id
    assert {s["stop"] for s in node_data["gradient"]} == {0, 1}
    results = node_data["results"]
    names = [n.name for n in graph.node if n.name]
    assert set(results) <= set(names)
    (table,) = [r["diagnostics"]["layers"] for r in report["rows"] if r["name"] == row]
    by_module = {d["module"]: d for d in table["layers"]}
    checked = 0
    for node in names:
        owner = _owner(node, set(by_module))
        expected = None if owner is None else by_module[owner][value]
        if expected is None or not math.isfinite(expected):
            assert node not in results, node  # no module of the table holds it, or its SQNR is infinite (identical)
            continue
        assert results[node]["value"] == pytest.approx(expected, rel=1e-12), node
        checked += 1
    assert checked >= 0.6 * len(names), (checked, len(names))  # most of the graph is coloured


def test_views_say_how_to_open_it_and_a_later_run_without_a_table_removes_it(failing: Path, capsys) -> None:
    html = (failing / "r.html").read_text()
    assert "node data for Model Explorer" in html and "--node_data_paths=" in html
    assert "Accuracy, latency and size" in html and "accuracy on the golden labels (%) against latency" in html
    report = _report(failing)
    deprecations = [n for r in report["rows"] for n in r["notes"] if n.startswith("DeprecationWarning:")]
    assert deprecations and not any(n[:60] in html for n in deprecations)  # in the JSON notes only (README, "Reports")
    assert main(["judge", str(failing / "r.json"), "--max-mae", "1e-9"]) == 1
    out = capsys.readouterr().out
    assert (f"graph onnx: its per-layer errors as Model Explorer node data: model-explorer {failing / 'out' / 'onnx.onnx'} "
            f"--extensions=model_explorer_onnx --node_data_paths={failing / 'out' / 'onnx.node-data.json'}") in " ".join(out.split())
    # the same out folder, the default gates: no row fails, no int8 table is asked for: no node data, and the old files go
    assert main([str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx,onnx-int8-dynamic", "-q", "--no-cache",
                 "--out", str(failing / "out"), "--max-mae", "1e-3"]) == 0
    capsys.readouterr()
    assert not list((failing / "out").glob("*.node-data.json"))


def test_a_link_planted_where_node_data_goes_is_refused_and_the_row_says_so(failing: Path, tmp_path: Path) -> None:
    """Issue 47: the node-data writer follows no link in --out. A link to a file outside at one row's name is
    refused (that row keeps its verdict, its note says the file was not written and why), a hard link at the
    other's is replaced by name; the files outside keep their bytes."""
    from export_check.rejudge import judge_report
    from export_check.report.node_data import node_data, write_all

    report = judge_report(failing / "r.json", {})  # the fixture's rows, as judged: a failing onnx row with its per-layer table
    out, home = tmp_path / "out", tmp_path / "home"
    out.mkdir(), home.mkdir()
    (home / ".bashrc").write_bytes(b"export PATH=$HOME/bin:$PATH\n")
    (home / "notes.json").write_bytes(b'{"mine": true}\n')
    (out / "onnx.node-data.json").symlink_to(home / ".bashrc")
    os.link(home / "notes.json", out / "onnx-int8-dynamic.node-data.json")
    before = {p.name: p.read_bytes() for p in home.iterdir()}
    rows, written = write_all(report.rows, out)
    assert {p.name: p.read_bytes() for p in home.iterdir()} == before and (out / "onnx.node-data.json").is_symlink()
    by_name = {r.name: r for r in rows}
    assert [r.status for r in rows] == [r.status for r in report.rows] and by_name["onnx"].status == "fail"
    assert by_name["onnx"].notes[-1] == (f"Model Explorer node data not written: {out / 'onnx.node-data.json'}: is a symbolic link "
                                         f"inside {out} that export-check did not make; not written through it: remove it")
    assert written == (("onnx-int8-dynamic", str(out / "onnx-int8-dynamic.node-data.json")),)
    int8 = by_name["onnx-int8-dynamic"]
    assert json.loads((out / "onnx-int8-dynamic.node-data.json").read_text()) == json.loads(json.dumps(node_data(int8.name, int8.diagnostics.layers)))
    assert os.stat(out / "onnx-int8-dynamic.node-data.json").st_nlink == 1
