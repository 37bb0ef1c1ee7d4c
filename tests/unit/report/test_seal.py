"""report/seal.py: merge accepts a JSON report only with a seal made under this user's key over its exact bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.cache.secret import KEY_ENV, CacheKey
from export_check.errors import UsageError
from export_check.report.seal import FIELD, key_id, reader_key, seal, sealed, verified

KEY = CacheKey(Path("k"), b"\x11" * 32)
OTHER = CacheKey(Path("o"), b"\x22" * 32)
REPORT = json.dumps({"schema": "export-check-report", "rows": [{"name": "onnx", "mae": 1.5e-7}]}, indent=1)
SHOWN = Path("r.json")


def check(data: bytes, key: CacheKey = KEY) -> bytes:
    return verified(SHOWN, data, lambda: key)


def refusal(data: bytes, key: CacheKey = KEY) -> str:
    with pytest.raises(UsageError) as info:
        check(data, key)
    assert str(info.value).startswith(f"{SHOWN}: ") and "\n" not in str(info.value)
    return str(info.value)


def test_a_sealed_report_is_json_with_the_seal_first_and_verifies_to_the_original() -> None:
    text = seal(REPORT, KEY)
    data = json.loads(text)
    assert list(data)[0] == FIELD and data[FIELD].startswith(f"hmac-sha256:{key_id(KEY)}:")
    assert {k: v for k, v in data.items() if k != FIELD} == json.loads(REPORT)
    assert check(text.encode()) == REPORT.encode()


def test_key_ids_differ_by_key_and_say_nothing_about_it() -> None:
    assert key_id(KEY) != key_id(OTHER) and len(key_id(KEY)) == 16 and KEY.secret.hex()[:16] != key_id(KEY)


def test_unsealed_another_key_damaged_and_edited_reports_are_told_apart() -> None:
    data = seal(REPORT, KEY).encode()
    assert "carries no seal" in refusal(REPORT.encode())
    assert f"sealed with another key (key {key_id(KEY)}, this machine's is {key_id(OTHER)})" in refusal(data, OTHER)
    assert "seal is damaged" in refusal(data.replace(b"hmac-sha256:", b"hmac-sha256:zz", 1))
    assert "edited since export-check wrote it" in refusal(data.replace(b"1.5e-07", b"1.5e-08"))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_changed_byte_is_refused(data: st.DataObject) -> None:
    sealed_bytes = bytearray(seal(REPORT, KEY).encode())
    index = data.draw(st.integers(0, len(sealed_bytes) - 1))
    sealed_bytes[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(UsageError):
        check(bytes(sealed_bytes))


@pytest.mark.parametrize("text", ["[]", "{}", "{ }", " {\"a\": 1}"])
def test_only_an_object_with_members_is_sealed(text: str) -> None:
    with pytest.raises(ValueError):
        seal(text, KEY)


def test_sealed_uses_this_users_key_and_reader_key_never_makes_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "config" / "cache.key"
    monkeypatch.setenv(KEY_ENV, str(key_file))
    with pytest.raises(UsageError, match="no cache key at"):
        reader_key()
    assert not key_file.exists()
    text, note = sealed(REPORT, tmp_path / "cache")
    assert note is None and key_file.exists()
    assert verified(SHOWN, text.encode()) == REPORT.encode()  # the reader's key is the writer's


def test_a_key_that_proves_nothing_leaves_the_report_unsealed_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "cache.key"
    key_file.write_bytes(b"\x00" * 32)
    key_file.chmod(0o644)
    monkeypatch.setenv(KEY_ENV, str(key_file))
    text, note = sealed(REPORT, tmp_path / "cache")
    assert text == REPORT and note is not None and note.startswith("export-check: the JSON report is not sealed (")
    assert "merge` will refuse it" in note
