"""Runtime failures in the user's terms: the line of a TorchScript or onnxruntime error that says
what went wrong, not the interpreter's traceback or the C++ source location before it.

>>> class E(RuntimeError): pass
>>> tail = "RuntimeError: shape '[16, 64]' is invalid for input of size 768"
>>> runtime_error(E("The following operation failed in the TorchScript interpreter.\\nTraceback of TorchScript ...\\n"
...                 "    x = torch.reshape(y, [16, 64])\\n        ~~~~ <--- HERE\\n" + tail)) == tail
True
>>> runtime_error(E("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape node. Name:'/Reshape' "
...                 "Status Message: /onnxruntime_src/core/providers/cpu/tensor/reshape_helper.h:91 onnxruntime::ReshapeHelper::"
...                 "ReshapeHelper(const TensorShape&, TensorShapeVector&, bool) input_shape_size == requested_shape_size was false. "
...                 "The input tensor cannot be reshaped to the requested shape. Input shape:{12,64}"))
"onnxruntime: Reshape node '/Reshape' failed: The input tensor cannot be reshaped to the requested shape. Input shape:{12,64}"
"""

from __future__ import annotations

import re

from ..errors import describe_exception, plain_text

_ORT = re.compile(r"while running (?P<op>\w+) node\. Name:'(?P<name>[^']*)' Status Message: (?P<msg>.*)", re.S)
_CPP = re.compile(r"^\S+\.(?:h|cc|cpp):\d+ \S+\(.*?\) ")


def runtime_error(exc: BaseException) -> str:
    """One line naming what went wrong while an artifact ran."""
    text = plain_text(str(exc))
    if "TorchScript interpreter" in text or "Traceback of TorchScript" in text:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if lines:
            return lines[-1][:400]
    match = _ORT.search(" ".join(text.split()))
    if match:
        msg = _CPP.sub("", match["msg"])
        msg = re.sub(r"^.*? was false\. ", "", msg)
        return f"onnxruntime: {match['op']} node '{match['name']}' failed: {msg[:300]}"
    return describe_exception(exc)
