"""Public-key evidence (issue 47, item 6): `keygen` makes a pair; the build signs its bundle and report with the
private key; a lab holding the public key alone replays the bundle and merges the reports; one altered byte in any
member, a report signed by another key, a wrong or missing key file and a missing `cryptography` are one line."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_replay import check_and_bundle

from conftest import REPO, read_report
from export_check.bundle import MANIFEST, open_bundle
from export_check.cache.secret import KEY_ENV
from export_check.cli import main
from export_check.errors import UsageError
from export_check.report.signing import load_public_keys, load_signer

SEAL = '"export_check_seal": "ed25519:'


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build machine: a key pair from `export-check keygen`, the onnx row checked, its bundle and report signed."""
    folder = tmp_path_factory.mktemp("build")
    assert main(["keygen", str(folder / "build.pem")]) == 0
    check_and_bundle(folder, folder / "shared.key", "a", "onnx", "--sign-key", str(folder / "build.pem"))
    return folder


@pytest.fixture
def lab(build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lab machine: the bundle, the build's report and the public key, and no shared key (KEY_ENV names none yet)."""
    for name in ("a.bundle", "build-a.json", "build.pem.pub"):
        shutil.copy(build / name, tmp_path / name)
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "lab.key"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_line(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and all(w in err for w in words), err
    return err


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_replaces_one(build: Path, capsys) -> None:
    private, public = build / "build.pem", build / "build.pem.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    before = private.read_bytes()
    assert main(["keygen", str(private)]) == 2
    _one_line(capsys, str(private), "exists; keygen never replaces a key")
    assert private.read_bytes() == before
    signer = load_signer(private)
    assert list(load_public_keys(public).by_id) == [signer.id]  # the pair: the public key's id is the signer's


def test_the_build_signs_and_a_lab_with_the_public_key_alone_replays_and_merges(build: Path, lab: Path, capsys) -> None:
    assert (build / "build-a.json").read_text().startswith("{" + SEAL)
    with zipfile.ZipFile(lab / "a.bundle") as archive:
        assert archive.read(MANIFEST).decode().startswith("{" + SEAL)
    assert not (lab / "lab.key").exists() and not list(lab.glob("*.pem"))  # no shared key, no private key here
    assert main(["replay", "a.bundle", "--verify-key", "build.pem.pub", "--target", "lab-1", "--out", "r", "-q", "--json", "t.json"]) == 0
    target = read_report(lab / "t.json")
    assert [(r["name"], r["status"]) for r in target["rows"]] == [("onnx", "pass")] and target["target"] == "lab-1"
    built = {r["name"]: r for r in read_report(lab / "build-a.json")["rows"]}
    assert abs(target["rows"][0]["metrics"]["mae"] - built["onnx"]["metrics"]["mae"]) <= 1e-9
    capsys.readouterr()
    assert main(["merge", "build-a.json", "t.json", "--verify-key", "build.pem.pub", "--json", "m.json"]) == 0
    merged = read_report(lab / "m.json")
    assert [m["name"].rsplit(" @ ", 1)[-1] for m in merged["models"]][1:] == ["lab-1"] and merged["exit_code"] == 0
    # without the public key neither is taken: the signature names the key it needs
    assert main(["replay", "a.bundle", "--out", "r2", "-q"]) == 2
    _one_line(capsys, "a.bundle: signed with Ed25519 key", "--verify-key")
    assert main(["merge", "build-a.json", "t.json"]) == 2
    _one_line(capsys, "build-a.json: signed with Ed25519 key", "--verify-key")


def _flipped(source: Path, dest: Path, name: str) -> None:
    """``source`` with one byte in the middle of member ``name`` flipped, in place (the zip's bytes, stored members)."""
    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as archive:
        info = archive.getinfo(name)
    data[info.header_offset + 30 + len(name.encode()) + len(info.extra) + info.file_size // 2] ^= 0x01
    dest.write_bytes(bytes(data))


def test_one_altered_byte_in_any_member_is_refused_with_one_line(lab: Path, capsys) -> None:
    public = load_public_keys(lab / "build.pem.pub")
    with zipfile.ZipFile(lab / "a.bundle") as archive:
        names = archive.namelist()
    assert len(names) == 10  # the manifest, the onnx file, four batches of inputs and of eager outputs
    for name in names:
        altered = lab / "altered.bundle"
        _flipped(lab / "a.bundle", altered, name)
        with pytest.raises(UsageError) as refused:
            bundle = open_bundle(altered, public=public)
            try:
                for member in bundle.manifest["members"]:
                    bundle.read(member)
            finally:
                bundle.close()
        message = str(refused.value)
        assert "\n" not in message and str(altered) in message and "altered" in message and name in message, (name, message)
    # through the command line: the onnx file altered
    _flipped(lab / "a.bundle", lab / "b.bundle", "artifacts/onnx.onnx")
    assert main(["replay", "b.bundle", "--verify-key", "build.pem.pub", "--out", "r", "-q"]) == 2
    _one_line(capsys, "b.bundle: member artifacts/onnx.onnx was altered")
    # the manifest edited (a gate loosened) and zipped again with a right CRC: the signature says so
    with zipfile.ZipFile(lab / "a.bundle") as archive, zipfile.ZipFile(lab / "forged.bundle", "w") as out:
        for info in archive.infolist():
            data = archive.read(info)
            out.writestr(info, data.replace(b'"max_mae": 1e-05', b'"max_mae": 1.0') if info.filename == MANIFEST else data)
    assert main(["replay", "forged.bundle", "--verify-key", "build.pem.pub", "--out", "r", "-q"]) == 2
    _one_line(capsys, "forged.bundle: edited since export-check signed it")


def test_another_key_a_shared_key_seal_and_wrong_key_files_are_refused_with_one_line(build: Path, lab: Path, capsys) -> None:
    assert main(["keygen", "other.pem"]) == 0
    capsys.readouterr()
    # the build's report signed again by another key (its text as it was): refused, the keys named
    text = (lab / "build-a.json").read_text()
    body = "{" + text[text.index('"schema"'):]
    (lab / "other.json").write_text(load_signer(lab / "other.pem").sign(body, b"export-check JSON report\0"))
    assert main(["merge", "other.json", "--verify-key", "build.pem.pub"]) == 2
    _one_line(capsys, "other.json: signed by another key", "build.pem.pub holds")
    assert main(["replay", "a.bundle", "--verify-key", "other.pem.pub", "--out", "r", "-q"]) == 2
    _one_line(capsys, "a.bundle: signed by another key")
    # both public keys in one file (the build's and a lab's): each report is checked against its own
    (lab / "trusted.pem").write_bytes((lab / "build.pem.pub").read_bytes() + (lab / "other.pem.pub").read_bytes())
    assert main(["merge", "build-a.json", "--verify-key", "trusted.pem"]) == 0
    capsys.readouterr()
    # --verify-key on replay takes a signature only: a bundle sealed with the shared key is refused
    check_and_bundle(lab, lab / "shared.key", "hmac", "onnx", "--config", str(REPO / "pyproject.toml"))
    capsys.readouterr()
    assert main(["replay", "hmac.bundle", "--verify-key", "build.pem.pub", "--out", "r", "-q"]) == 2
    _one_line(capsys, "hmac.bundle: sealed with the shared cache key, not signed")
    for flags, words in ((["--verify-key", "missing.pub"], ("--verify-key missing.pub: no such key file", "keygen")),
                         (["--verify-key", "other.pem"], ("--verify-key other.pem: holds a private key",)),
                         (["--verify-key", "build-a.json"], ("holds no PEM public key",)),
                         (["--sign-key", "missing.pem", "--json", "x.json"], ("--sign-key missing.pem: no such key file",)),
                         (["--sign-key", "build.pem.pub", "--json", "x.json"], ("--sign-key build.pem.pub: not a PEM private key",))):
        assert main(["replay", "a.bundle", "--out", "r", "-q", *flags]) == 2, flags
        _one_line(capsys, *words)
    assert not (lab / "x.json").exists()


def test_a_check_given_a_missing_sign_key_stops_before_it_runs(tmp_path: Path, capsys) -> None:
    from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN

    assert main(["check", str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx", "-q", "--out", str(tmp_path / "o"),
                 "--json", str(tmp_path / "r.json"), "--sign-key", str(tmp_path / "nope.pem")]) == 2
    _one_line(capsys, f"--sign-key {tmp_path / 'nope.pem'}: no such key file")
    assert not (tmp_path / "o").exists()  # nothing built


def test_without_cryptography_a_key_option_names_the_extra_in_one_line(lab: Path) -> None:
    blocked = ("import sys; sys.modules['cryptography'] = None\n"
               "from export_check.cli import main\nsys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", blocked, "replay", "a.bundle", "--verify-key", "build.pem.pub", "--out", "r", "-q"],
                          capture_output=True, text=True, timeout=120, cwd=lab, env={**os.environ})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "--verify-key needs the cryptography package" in done.stderr and "pip install 'export-check[sign]'" in done.stderr
