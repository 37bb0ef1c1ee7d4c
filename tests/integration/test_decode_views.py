"""Every view shows a language model's token verdicts (issue 45, item 3): the terminal, Markdown, HTML and JUnit XML each
show, for every row that has one, KL mean and worst, generations equal, perplexity and its change against the row's
reference, and the first divergent step, each equal to the row's stored ``token_verdict`` (parsed back from the view).

One real report, cheaply: GPT-2 tiny on 4 prompts x 8 tokens, three kinds, the decode steps built with their cache written
one position off (tests/integration/test_decode.py's planted bug), so that some rows' generations diverge and others' do
not, whatever this CPU's kernels: the figures of both kinds of row are read back.
"""

from __future__ import annotations

import ast
import html
import json
import math
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from export_check.cli import main
from export_check.config import RunConfig
from export_check.decode.run import Plant, run_generation
from export_check.report import html as html_view
from export_check.report import junit, markdown, text
from export_check.results import Report

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "models" / "checkpoints"
PROMPTS = ['The "return" statement', "A class definition defines", "The for statement is used to", "Exceptions are raised by"]
KINDS = ("full-forward", "decode-onnx", "decode-torchao-int8")
# each figure's label (terminal, Markdown and HTML) and its JUnit property
FIGURES = {"KL mean": "token_kl_mean", "KL worst": "token_kl_worst", "generations equal": "token_generations_equal",
           "perplexity": "token_perplexity", "perplexity change": "token_perplexity_change", "first divergence": "token_first_divergence"}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    folder = tmp_path_factory.mktemp("lm-views")
    prompts = folder / "prompts"
    prompts.mkdir()
    (prompts / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    shutil.copyfile(CHECKPOINTS / "decoder_tokenizer.json", prompts / "tokenizer.json")
    (prompts / "generation.json").write_text(json.dumps({"new_tokens": 8}))
    arch = f"{ROOT / 'models' / 'decoders.py'}:gpt2_tiny"
    assert main(["golden", "record", str(CHECKPOINTS / "gpt2_tiny.pth"), "--arch", arch, "--inputs", str(prompts),
                 "--golden", str(folder / "golden")]) == 0
    config = RunConfig(checkpoint=CHECKPOINTS / "gpt2_tiny.pth", arch=arch, golden=folder / "golden", out_dir=folder / "out", kinds=KINDS)
    return run_generation(config, plant=Plant(write_offset=1))


def _close(shown: str, value: float, digits: int) -> bool:
    """``shown`` is ``value`` to ``digits`` significant digits (or decimals, for ``digits < 0``)."""
    got = float(shown)
    bound = 0.5 * 10 ** digits if digits < 0 else 0.5 * 10 ** (math.floor(math.log10(abs(value))) - digits + 1) if value else 0.0
    return abs(got - value) <= bound * (1 + 1e-9)


def _check(name: str, shown: dict[str, str], verdict: dict, compared_with: str, spaces_folded: bool = False) -> None:
    """The figures a view shows for a row (label -> text) against its stored verdict."""
    assert list(shown) == list(FIGURES), (name, shown)
    assert _close(shown["KL mean"], verdict["kl_mean"], 3) and _close(shown["KL worst"], verdict["kl_worst"], 3), (name, shown)
    equal = sum(p["equal"] for p in verdict["prompts"])
    assert shown["generations equal"] == f"{equal}/{len(verdict['prompts'])}", (name, shown)
    assert _close(shown["perplexity"], verdict["perplexity"], -4), (name, shown)
    change = re.fullmatch(r"([-+]\S+) \((\S+) (\S+)\)", shown["perplexity change"])
    assert change is not None, (name, shown)
    assert _close(change[1], verdict["perplexity"] - verdict["reference_perplexity"], 3), (name, shown)
    assert change[2] == compared_with and _close(change[3], verdict["reference_perplexity"], -4), (name, shown)
    diverged = [p for p in verdict["prompts"] if not p["equal"]]
    if not diverged:
        assert shown["first divergence"] == "none", (name, shown)
        return
    first = diverged[0]  # the first prompt that diverged, in the set's order, as the row's reason names it
    found = re.fullmatch(r"prompt (\S+) at step (\d+): ('.*'|\".*\") -> ('.*'|\".*\")", shown["first divergence"])
    assert found is not None, (name, shown)
    assert (found[1], int(found[2])) == (first["name"], first["first_step"]), (name, shown)
    tokens = (ast.literal_eval(found[3]), ast.literal_eval(found[4]))
    want = (first["expected_text"], first["got_text"])
    if spaces_folded:  # a Markdown cell folds runs of spaces into one
        tokens, want = tuple(" ".join(t.split()) for t in tokens), tuple(" ".join(t.split()) for t in want)
    assert tokens == want, (name, shown)


def _verdicts(report: Report) -> dict[str, tuple[dict, str]]:
    rows = {r.name: (json.loads(dict(r.details)["token_verdict"]), r.compared_with) for r in report.rows}
    assert list(rows) == ["eager", *KINDS]
    # the report is what the test needs: rows whose generations all match and rows whose do not
    assert any(all(p["equal"] for p in v["prompts"]) for v, _ in rows.values())
    assert any(not p["equal"] for v, _ in rows.values() for p in v["prompts"])
    return rows


def _labelled(parts: list[str]) -> dict[str, str]:
    """``label value`` parts (the terminal's) as label -> value, the longest label first (``perplexity change``)."""
    out = {}
    for part in parts:
        label = max((k for k in FIGURES if part.startswith(k + " ")), key=len)
        out[label] = part[len(label) + 1:]
    return out


def test_the_terminal_shows_each_rows_token_figures(report: Report) -> None:
    shown = {}
    for line in text.render(report).splitlines():
        if line.startswith("tokens "):
            name, _, rest = line.removeprefix("tokens ").partition(": ")
            shown[name] = _labelled(rest.split("; "))
    verdicts = _verdicts(report)
    assert list(shown) == list(verdicts)
    for name, (verdict, compared_with) in verdicts.items():
        _check(name, shown[name], verdict, compared_with)


def _table(rows: list[list[str]]) -> dict[str, dict[str, str]]:
    head, *body = rows
    assert head[0] == "artifact", head
    return {cells[0]: dict(zip(head[1:], cells[1:], strict=True)) for cells in body}


def test_markdown_shows_each_rows_token_figures(report: Report) -> None:
    page = markdown.render(report)
    section = page.split("### Tokens\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    rows = [[html.unescape(c.strip().replace("\\|", "|").replace("\\\\", "\\")) for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            for i, line in enumerate(section) if i != 1]  # the second line is the alignment row
    shown = _table([[c.strip("*") if j == 0 else c for j, c in enumerate(r)] for r in rows])
    verdicts = _verdicts(report)
    assert list(shown) == list(verdicts)
    for name, (verdict, compared_with) in verdicts.items():
        _check(name, shown[name], verdict, compared_with, spaces_folded=True)


def test_html_shows_each_rows_token_figures(report: Report) -> None:
    page = html_view.render(report)
    table = re.search(r"<h2>Tokens</h2><table class='tokens'>(.*?)</table>", page)
    assert table is not None
    rows = [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr)]
            for tr in re.findall(r"<tr>(.*?)</tr>", table[1])]
    shown = _table(rows)
    verdicts = _verdicts(report)
    assert list(shown) == list(verdicts)
    for name, (verdict, compared_with) in verdicts.items():
        _check(name, shown[name], verdict, compared_with)


def test_junit_shows_each_rows_token_figures_as_its_testcases_properties(report: Report) -> None:
    suite = ET.fromstring(junit.render(report)).find("testsuite")
    assert suite is not None
    labels = {key: label for label, key in FIGURES.items()}
    verdicts = _verdicts(report)
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == list(verdicts)
    for case in cases:
        name = str(case.get("name"))
        props = {p.get("name"): str(p.get("value")) for p in case.findall("properties/property")}
        _check(name, {labels[k]: v for k, v in props.items()}, *verdicts[name])
        # the testcase's text says the same figures, a line each
        out = str(case.findtext("system-out"))
        assert [f"{k}: {v}" for k, v in props.items()] == [line for line in out.splitlines() if line.startswith("token_")]



def test_next_steps_of_a_failing_language_model_row_speak_of_its_own_gate_not_the_images(report: Report) -> None:
    """A failing decode row's next step names its own gate (a weight-only row: its KL and top-1 options; a float row: the
    decode path), never an image gate's option, and never its positions as golden inputs."""
    from export_check.report.next_steps import next_steps

    failing = [r for r in report.rows if r.status == "fail"]
    assert "decode-onnx" in [r.name for r in failing]  # the planted cache offset, on any CPU
    lines = next_steps(report)
    for row in failing:
        family = json.loads(dict(row.details)["decode_judge"])["family"]
        line = next(line for line in lines if line.startswith(f"next: {row.name} "))
        if family.endswith("-weight"):
            assert f"--{family}-max-kl / --{family}-min-top1" in line, line
        else:
            assert line.endswith("its reasons name the prompt, the step and the suspect: fix the export's decode path"), line
        assert dict(row.details)["decode_gate"] in line
    assert not [line for line in lines if "relative-mae" in line or "changed on" in line], lines
    assert lines[-1] == 'docs: docs/how-to/your-own-language-model.md ("Setting the gates")'
