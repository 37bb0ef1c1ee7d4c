"""What a load that lacks the architecture's code says it lacks (protocol.missing_at_load), read off the
real errors of pickle and torch's pytree, and the row's sentence for each (protocol.load_needs)."""

from __future__ import annotations

import pickle
import sys
import types

import pytest

from export_check.builder.protocol import load_needs, missing_at_load


def _error_text(call) -> str:
    with pytest.raises(Exception) as caught:
        call()
    return f"{type(caught.value).__name__}: {caught.value}"


def test_an_unregistered_pytree_type_is_named_from_torchs_own_error() -> None:
    import torch.utils._pytree as pytree

    module = types.ModuleType("userpkg_for_pytree.outputs")
    Output = type("Output", (dict,), {"__module__": module.__name__})
    pytree.register_pytree_node(Output, lambda d: (list(d.values()), list(d.keys())), lambda v, k: Output(zip(k, v, strict=True)),
                                serialized_type_name="userpkg_for_pytree.outputs.Output")
    try:
        spec = pytree.treespec_dumps(pytree.tree_flatten(Output(logits=1))[1])
    finally:
        pytree._deregister_pytree_node(Output)
    text = _error_text(lambda: pytree.treespec_loads(spec))  # what torch.export.load meets in a process without the class
    assert missing_at_load(["RuntimeError: We ran into an error when deserializing the saved file.", text]) == (
        "pytree", "userpkg_for_pytree.outputs.Output")


def test_a_pickled_class_whose_module_is_gone_or_lacks_it_is_named_from_pickles_own_error(monkeypatch) -> None:
    module = types.ModuleType("userpkg_for_pickle")
    Head = type("Head", (), {"__module__": module.__name__, "__qualname__": "Head"})
    module.Head = Head
    monkeypatch.setitem(sys.modules, module.__name__, module)
    data = pickle.dumps(Head())
    del module.Head  # the module is there, the class is not
    assert missing_at_load([_error_text(lambda: pickle.loads(data))]) == ("class", "userpkg_for_pickle.Head")
    monkeypatch.delitem(sys.modules, module.__name__)  # the module is not there at all
    assert missing_at_load([_error_text(lambda: pickle.loads(data))]) == ("module", "userpkg_for_pickle")


def test_a_failure_that_names_nothing_missing_is_not_made_into_one() -> None:
    assert missing_at_load(["RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
                            "ValueError: not a registered thing"]) == ("", "")


def test_each_sentence_names_what_the_file_needs_and_the_way_out() -> None:
    pytree = load_needs("torch-export.pt2", "pytree", "mypkg.modeling.Out", None, "RuntimeError: x")
    assert pytree.startswith("torch-export.pt2 needs mypkg.modeling.Out registered as a pytree node to load")
    assert pytree.endswith("import mypkg.modeling in the deployed process before loading the file, or return a tuple or dict from forward")
    cls = load_needs("m.pt2", "class", "mypkg.layers.Head", None, "")
    assert cls.startswith("m.pt2 needs class mypkg.layers.Head to load") and "import mypkg.layers in the deployed process" in cls
    module = load_needs("m.pt2", "module", "mypkg", None, "")
    assert "needs module mypkg to load" in module and "install it where the file is deployed" in module
    # a lone architecture file is imported under a private name no deployed process has: say where the class lives
    lone = load_needs("m.pt2", "pytree", "_export_check_arch_123.Out", "/work/arch.py", "")
    assert "Out (defined in /work/arch.py, which export-check imports under the private name _export_check_arch_123)" in lone
    assert "move Out into a module the deployed process can import by name" in lone
    other = load_needs("m.onnx", "", "", None, "ValueError: bad file")
    assert other == "reloading m.onnx in a process that has not imported the architecture failed: ValueError: bad file"


def test_every_runtime_loader_imported_ahead_belongs_to_a_kinds_runtime_and_exists() -> None:
    import importlib.util

    from export_check.artifacts import KINDS
    from export_check.artifacts.runtimes import RUNTIME_LOADERS

    assert set(RUNTIME_LOADERS) <= {kind.runtime for kind in KINDS}
    for modules in RUNTIME_LOADERS.values():
        assert all(importlib.util.find_spec(name) is not None for name in modules), modules
