"""The bridge of the JavaScript targets (jstargets/bridge.py): a frame carries each array's bytes, dtype and shape
exactly; the server hands out only the files it was given, under its random token."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from export_check.jstargets.bridge import Bridge, frame, unframe

DTYPES = st.sampled_from([np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_, np.float16])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), DTYPES.flatmap(lambda d: arrays(d, array_shapes(min_dims=0, max_dims=4, max_side=5)))),
                max_size=4, unique_by=lambda t: t[0]),
       st.dictionaries(st.sampled_from(["op", "session", "error"]), st.text(max_size=20)))
def test_a_frame_gives_back_every_array_bit_for_bit_and_the_header(named: list, header: dict) -> None:
    back_header, back = unframe(frame(header, named))
    assert {k: back_header[k] for k in header} == header
    assert list(back) == [name for name, _ in named]
    for name, array in named:
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        assert back[name].tobytes() == np.asarray(array, order="C").tobytes()  # NaNs and -0.0 included


def test_the_server_serves_only_the_files_it_was_given_under_its_token(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "ort.wasm.min.mjs").write_text("export const x = 1;")
    (tmp_path / "secret.txt").write_text("no")
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07")
    bridge = Bridge(dist)
    try:
        url = bridge.serve_file(model)
        with urllib.request.urlopen(url) as reply:
            assert reply.read() == b"\x08\x07"
        with urllib.request.urlopen(f"{bridge.base}/ort/ort.wasm.min.mjs") as reply:
            assert reply.headers["Content-Type"] == "text/javascript" and reply.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
        base = bridge.base.rsplit("/", 1)[0]
        for wrong in (f"{bridge.base}/ort/../secret.txt", f"{bridge.base}/ort/..%2Fsecret.txt", f"{base}/page.html", f"{bridge.base}/files/x",
                      f"{bridge.base}/../{bridge.token}/ort/ort.wasm.min.mjs".replace(bridge.token, "0" * 32)):
            try:
                urllib.request.urlopen(wrong)
                raise AssertionError(wrong)
            except urllib.error.HTTPError as exc:
                assert exc.code == 404, wrong
    finally:
        bridge.close()
