"""The README and the documentation site (issue 29): the site builds with ``mkdocs build --strict``; its
reference tables hold every kind, gate and option of the code's own tables; the README's first screen
matches a real run; and every code block that is a command or Python runs, its shown output checked.

The convention for code blocks (README.md and docs/**/*.md), in the block's info string:

* every fence names its language (``text`` for output and formats);
* ``console`` blocks: each ``$ `` line is run by the shell (``export-check``, ``python`` and ``pytest``
  are this interpreter's), and the lines under it are its output: they must appear, in order, in what it
  printed (stdout then stderr), with every number and sha256 prefix masked (``first_screen.normalise``),
  so a figure that differs by CPU or load never fails a test but a column, a gate or a verdict does; a
  line ``...`` skips lines, a line ending in ``...`` matches on what comes before it. A command
  expecting another exit code says so in a comment: ``$ export-check m.pth  # exit 1``;
* ``sh``, ``bash`` and ``shell`` blocks: every line is a command run by the shell, exit code 0;
* ``python`` blocks are run as a script;
* a block with ``title="FILE"`` (a file name) is written to FILE (appended when FILE exists, so a page can
  add tables to one pyproject.toml) for the blocks after it; a ``title="test_*.py"`` file is one pytest
  runs (then, or by the page's own later ``$ pytest`` naming no file, which runs every test file);
* a command or Python block that cannot run here carries ``title="not run: WHY"`` (MkDocs shows the
  title, so the reader sees it too): e.g. it needs a Mac, installs packages, or is the test suite itself.

A page's blocks run in order in one folder: a fresh copy of the bundled project (models/, golden/, the repository's
pyproject.toml), or an empty project when the page says ``<!-- docs-test: empty project -->``. All pages
share one artifact cache, one cache key and one project path (made afresh for each page), so the bundled check a page
repeats costs the cache's 0.3 s, not a build.
"""

from __future__ import annotations

import html
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "docs"))
import first_screen  # noqa: E402  (docs/first_screen.py: writes the README's first screen)
import gen_reference  # noqa: E402  (docs/gen_reference.py: the MkDocs hook generating the reference tables)

PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
RUNNABLE = {"console", "sh", "bash", "shell", "python"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
TITLE = re.compile(r'title="([^"]*)"')
EMPTY = "<!-- docs-test: empty project -->"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    title: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def not_run(self) -> str | None:
        return self.title[len("not run:"):].strip() if self.title.startswith("not run:") else None

    @property
    def file(self) -> str | None:
        return self.title if self.title and not self.not_run and " " not in self.title else None


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        info = m.group("info").strip()
        title = TITLE.search(info)
        body = "\n".join(line[len(m.group("indent")):] for line in m.group("body").splitlines()) + "\n"
        found.append(Block(page, text.count("\n", 0, m.start()) + 1, info.split()[0] if info else "", title.group(1) if title else "", body))
    return found


def first_screen_block(block: Block) -> bool:
    """The README's first screen: run and compared by test_the_readmes_first_screen_is_what_the_bundled_check_prints."""
    return block.page.name == "README.md" and block.body == first_screen.readme_screen(block.page.read_text(encoding="utf-8"))


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if ((b.language in RUNNABLE and not b.not_run) or b.file) and not first_screen_block(b)]


# ---------------------------------------------------------------------------------------------- the site


def _mkdocs(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about MkDocs 2 is not a warning of this site
    return subprocess.run([sys.executable, "-m", "mkdocs", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_site_builds_with_no_warning_and_its_reference_pages_hold_every_kind_gate_and_option(tmp_path: Path) -> None:
    from export_check.artifacts import KINDS
    from export_check.gates import GATE_FAMILIES, GATE_METRICS, GATE_OPTIONS
    from export_check.options import OPTIONS

    done = _mkdocs("build", "--strict", "--site-dir", str(tmp_path / "site"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    site = tmp_path / "site"

    def page(name: str) -> str:
        return html.unescape((site / name / "index.html").read_text(encoding="utf-8"))

    kinds, gates, settings, cli = page("reference/artifact-kinds"), page("reference/gates"), page("reference/settings"), page("reference/cli")
    for kind in KINDS:
        assert f"<code>{kind.name}</code>" in kinds and kind.description.split(" (")[0][:40] in kinds, kind.name
    for family in GATE_FAMILIES:
        assert f"<code>{family.default.describe()}</code>" in gates, family.name
    assert all(m.name in gates for m in GATE_METRICS)
    assert all(f"<code>--{o.name}</code>" in cli for o in GATE_OPTIONS)
    for option in (o for o in OPTIONS if o.commands):  # settings-only keys have no flag: the settings page
        shown = option.name.upper() if option.positional else f"--{option.name}"
        assert f"<code>{shown}</code>" in cli, option.name
    for option in (o for o in OPTIONS if o.settings):
        assert f"<code>{option.name}</code>" in settings, option.name
    api = page("reference/api")
    assert all(f'id="export_check.api.{name}"' in api for name in ("check", "record", "approve", "verify", "options_of"))
    assert "<!-- generated:" not in kinds + gates + settings + cli
    # the pages whose tables the hooks generate beyond the reference's: the kind table, the module map, the test map
    accounts, modules, tests = page("explanation/artifacts-and-gates"), page("explanation/module-map"), page("reference/test-map")
    for kind in KINDS:
        assert f"<td><code>{kind.name}</code></td>\n<td><code>{kind.suffix}</code></td>" in accounts, kind.name
    assert "<td><code>compare.py</code></td>" in modules and "<td><code>test_compare.py</code></td>" in tests
    assert "<!-- generated" not in accounts + modules + tests


def test_an_unknown_generated_table_is_an_error_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown generated table 'kind'; choose from kinds, groups"):
        gen_reference.expand("<!-- generated: kind -->")


def test_every_page_is_in_the_site_and_every_fence_names_its_language() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES:
        if page.parent != REPO:
            assert str(page.relative_to(REPO / "docs")) in nav, f"{page} is in no section of the site's nav (mkdocs.yml)"
        for block in blocks(page):
            assert block.language, f"{block.where}: a fence without a language; name it (text for output and formats)"


def test_every_command_and_python_block_runs_or_says_why_not() -> None:
    """The counts, for the record: the blocks run by test_the_blocks_of_each_page_run, and those marked not run."""
    ran, marked = [], []
    for page in PAGES:
        for block in blocks(page):
            if block.language in RUNNABLE:
                (marked if block.not_run else ran).append(block)
            # a test defined in a script would be defined and never run: it must be a test file pytest runs
            assert not (block.language == "python" and not block.not_run and re.search(r"^def test_", block.body, re.M)
                        and not (block.file or "").startswith("test_")), f'{block.where}: give it title="test_NAME.py"'

    for block in marked:
        assert len(block.not_run or "") >= 10, f"{block.where}: say why it is not run"
    print(f"\n{len(ran)} command and Python blocks run, {len(marked)} marked not run")
    assert len(ran) >= 15


# ------------------------------------------------------------------------------------- running the blocks


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The artifact cache of every page; the key that seals its entries is beside it (``_keyed``)."""
    return tmp_path_factory.mktemp("docs-cache")


def _keyed(env: dict[str, str], cache: Path) -> dict[str, str]:
    """``env`` with the cache key of ``cache``: one for every page. The key file is found through XDG_CONFIG_HOME, which
    conftest's private_cache_dir makes every test's own, and a check trusts no entry sealed under another key: each page
    would rebuild what the page before it stored."""
    env["XDG_CONFIG_HOME"] = str(cache.parent / f"{cache.name}-config")
    return env


def _env(cache: Path) -> dict[str, str]:
    env = _keyed(first_screen.environment(cache), cache)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("CI", None)  # the README's pytest example records nothing, but its golden set is already there: as on a developer's machine
    return env


def _shell(command: str) -> str:
    """The command with this interpreter's export-check, python and pytest (a console script's shebang may name another)."""
    python = shlex.quote(sys.executable)
    for word, replacement in (("export-check", f"{python} -m export_check"), ("pytest", f"{python} -m pytest"), ("python", python)):
        command = re.sub(rf"(^|(?<=[;&|(] )){word}\b", replacement, command)
    return command


def output_matches(shown: list[str], printed: str) -> str | None:
    """None when every shown line appears in order in ``printed`` (masked), else the first line that does not."""
    actual = first_screen.normalise(printed)
    at = 0
    for line in first_screen.normalise("\n".join(shown)):
        if line == "...":
            continue
        prefix = line[:-3].rstrip() if line.endswith("...") else None
        while at < len(actual) and not (actual[at].startswith(prefix) if prefix is not None else actual[at] == line):
            at += 1
        if at == len(actual):
            return line
        at += 1
    return None


def _open(command: str) -> bool:
    """Whether ``command`` ends inside a quoted argument (the shell would read on)."""
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return True
    return False


def _console(block: Block, project: Path, env: dict[str, str]) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in block.body.splitlines():
        if commands and _open(commands[-1][0]):  # a quoted argument goes on over lines
            commands[-1] = (commands[-1][0] + "\n" + line, [])
        elif line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
    assert commands, f"{block.where}: a console block without a $ command"
    for command, shown in commands:
        expected = int(m.group(1)) if (m := re.search(r"#\s*exit (\d+)\s*$", command)) else 0
        done = subprocess.run(_shell(command), shell=True, cwd=project, env=env, capture_output=True, text=True, timeout=900)
        printed = done.stdout + done.stderr
        assert done.returncode == expected, f"{block.where}: `{command}` exited {done.returncode}, not {expected}:\n{printed}"
        assert "Traceback" not in printed, f"{block.where}: `{command}`:\n{printed}"
        missing = output_matches(shown, done.stdout.replace(f"{project}{os.sep}", "") + done.stderr)
        assert missing is None, f"{block.where}: `{command}` no longer prints the shown line\n  {missing}\nit printed:\n{printed}"


def _runs_every_test_file(block: Block) -> bool:
    """Whether ``block`` runs ``pytest`` in the project naming no file, folder or -k/-m selection: every test file, to
    exit 0."""
    if block.language != "console" or block.not_run:
        return False
    for line in block.body.splitlines():
        expects_failure = (m := re.search(r"#\s*exit (\d+)\s*$", line)) is not None and m.group(1) != "0"
        if line.startswith("$ ") and not _open(line[2:]) and not expects_failure:
            words = shlex.split(line[2:], comments=True)
            options = [word for at, word in enumerate(words[1:]) if not (at and words[at] == "-p")]  # -p NAME: a plugin
            if words[:1] == ["pytest"] and all(o.startswith("-") and o not in ("-k", "-m") for o in options):
                return True
    return False


def run_block(block: Block, project: Path, env: dict[str, str], pytest_later: bool = False) -> None:
    """Run ``block`` in ``project``. ``pytest_later``: a later block of the page runs every test file (a test file written
    now is run there, with the page's shown output checked, not twice)."""
    if block.file:
        target = project / block.file
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as f:
            f.write(("\n" if target.stat().st_size else "") + block.body)
        if block.file.startswith("test_") and block.file.endswith(".py") and not pytest_later:
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", block.file], cwd=project, env=env,
                                  capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, f"{block.where}: pytest {block.file}:\n{done.stdout}{done.stderr}"
        return
    if block.language == "console":
        _console(block, project, env)
    elif block.language == "python":
        done = subprocess.run([sys.executable, "-c", block.body], cwd=project, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{block.where}: the Python block failed:\n{done.stdout}{done.stderr}"
    else:
        for line in block.body.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                done = subprocess.run(_shell(line), shell=True, cwd=project, env=env, capture_output=True, text=True, timeout=900)
                assert done.returncode == 0, f"{block.where}: `{line}` exited {done.returncode}:\n{done.stdout}{done.stderr}"


def _fresh_folder(cache: Path) -> Path:
    """The folder a page's project is made in: emptied for each page, and the same for every page. The cache keys a check
    on the architecture's file by its absolute path (settings make ``models/resnet.py:ResNet`` absolute), so pages
    checking the bundled model in folders of their own could never take an entry another page stored."""
    folder = cache.parent / f"{cache.name}-project"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    return folder


def _project(page: Path, cache: Path) -> Path:
    if EMPTY in page.read_text(encoding="utf-8"):
        project = _fresh_folder(cache) / "project"
        (project / ".git").mkdir(parents=True)
        return project
    return first_screen.project_copy(_fresh_folder(cache))


def test_the_readmes_first_screen_is_what_the_bundled_check_prints(cache: Path) -> None:
    """The README's first screen against a real run (as docs/first_screen.py writes it). Notes are left out of the
    comparison: which notes a run prints depends on the machine's load (the diagnostics budget, --diagnostics-budget)."""
    project = first_screen.project_copy(_fresh_folder(cache))
    done = first_screen.run(project, _keyed(first_screen.environment(cache), cache), *first_screen.COMMAND[1:])
    assert done.returncode == 0, done.stdout + done.stderr

    def shown(text: str) -> list[str]:
        return [line for line in first_screen.normalise(text) if not line.startswith("note ")]

    readme = first_screen.readme_screen((REPO / "README.md").read_text(encoding="utf-8"))
    assert shown(readme) == shown(first_screen.screen(done.stdout, project)), "run python docs/first_screen.py to update the README"
    assert "relMAE<=5% & top1>=98%" in readme and any(line.startswith("verdict  artifact") for line in readme.splitlines())


def _clears_the_cache(page: Path) -> bool:
    return any("cache clear" in block.body or "cache prune" in block.body for block in runnable(page))


# In the order of PAGES, but a page that empties the shared cache (speed-and-cache.md) last, so that the pages after it in
# that order do not rebuild what it removed. The README's first screen (above) runs before them all: its check is a
# newcomer's first, with an empty cache, and stores what the pages' repeats of it then take from there.
@pytest.mark.parametrize("page", sorted((p for p in PAGES if runnable(p)), key=_clears_the_cache), ids=lambda p: str(p.relative_to(REPO)))
def test_the_blocks_of_each_page_run(page: Path, cache: Path) -> None:
    project, env = _project(page, cache), _env(cache)
    page_blocks = runnable(page)
    for at, block in enumerate(page_blocks):
        run_block(block, project, env, pytest_later=any(_runs_every_test_file(later) for later in page_blocks[at + 1:]))


def test_the_output_matcher_fails_on_a_changed_gate_or_verdict_and_not_on_a_number() -> None:
    printed = "PASS  onnx  7.99e-07  float\ngates: float MAE<=1e-05; int8 relMAE<=5% & top1>=98%\nPASSED: 7 passed in 20.1s\n"
    assert output_matches(["PASS  onnx  1.23e-08  float", "...", "PASSED: 7 passed..."], printed) is None
    assert output_matches(["gates: float MAE<=1e-05; int8 MAE<=0.1 & top1>=98%"], printed) is not None
    assert output_matches(["FAIL  onnx  7.99e-07  float"], printed) is not None
    assert output_matches(["PASSED: 7 passed in 20.1s", "PASS  onnx  7.99e-07  float"], printed) is not None  # order counts


# ---------------------------------------------------------------------------------------------- the README


def test_the_readme_stays_short_and_keeps_the_two_commands_first() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    words = len(re.sub(r"```.*?```", "", text, flags=re.S).split())
    assert words <= 2500, f"the README has {words} words outside code blocks; move the detail to docs/"
    first = next(b for b in blocks(REPO / "README.md"))
    assert first.body.splitlines()[:2] == ["./dev check     # the main job: export-check on the bundled trained model and golden set",
                                           "./dev test      # the test suite (tox, against the installed package)"]


def test_the_readmes_ci_job_is_ten_lines_and_its_command_is_valid() -> None:
    import yaml

    from export_check.cli import _normalise, build_parser

    (block,) = [b for b in blocks(REPO / "README.md") if b.language == "yaml"]
    assert len(block.body.splitlines()) <= 10
    (job,) = yaml.safe_load(block.body)["jobs"].values()
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert runs[0].split() == ["python", "-m", "pip", "install", "-c", "constraints.txt", "-e", "."]
    words = shlex.split(runs[1])
    assert words[0] == "export-check"
    build_parser().parse_args(_normalise([w.replace("$GITHUB_STEP_SUMMARY", "/tmp/summary.md") for w in words[1:]]))
