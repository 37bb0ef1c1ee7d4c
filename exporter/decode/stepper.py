"""Step one reloaded decode artifact token by token, as an app would: a standalone script.

Run as ``python -I stepper.py RUNTIME FILE REQUEST.npz RESULT.npz [CACHE_SHAPE]`` by
:mod:`export_check.decode.stepping`, in a fresh interpreter that imports the runtime and numpy and
nothing of export_check or of the model's architecture (``transformers`` loaded here is an error).
For each prompt of the request it runs two loops through the file:

* teacher-forced: prompt + approved continuation fed one token per step, the logits of every position
  kept (``forced_<i>``, shape ``(P + N, vocab)``);
* free-running greedy: the prompt prefilled a token per step, then the argmax fed back ``N - 1`` times
  (``generated_<i>``, shape ``(N,)``).

Runtimes: ``torch-export`` / ``onnxruntime`` / ``executorch`` call the decode step
``(input_ids, position, past_key, past_value) -> (logits, present_key, present_value)`` with a
zero cache of ``CACHE_SHAPE`` (``L,H,S,D``) at the start of each loop; ``torch-export-full`` calls
the full forward on the whole sequence each step (no cache: what the single-forward check ships).
"""

from __future__ import annotations

import sys

import numpy as np


def _torch_loader(path: str, full: bool):
    import torch

    if "torchao" in sys.argv[6:7]:  # a weight-only int8 file: torchao registers the ops and tensor types it holds
        import torchao  # noqa: F401
    module = torch.export.load(path).module()

    if full:
        def full_call(tokens):
            with torch.no_grad():
                return module(torch.from_numpy(tokens[None]))[0].numpy()
        return full_call

    def step(token, position, key, value):
        with torch.no_grad():
            out = module(torch.from_numpy(token), torch.from_numpy(position), torch.from_numpy(key), torch.from_numpy(value))
        return tuple(o.numpy() for o in out)
    return step


def _onnx_loader(path: str):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def step(token, position, key, value):
        return tuple(session.run(None, {"input_ids": token, "position": position, "past_key": key, "past_value": value}))
    return step


def _executorch_loader(path: str):
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(path).load_method("forward")

    def step(token, position, key, value):
        out = method.execute([torch.from_numpy(token), torch.from_numpy(position), torch.from_numpy(key), torch.from_numpy(value)])
        return tuple(o.numpy() for o in out)
    return step


def _loop_step(step, cache_shape, tokens, feed_back: int):
    """Feed ``tokens`` a step each, then ``feed_back`` argmaxes; the logits of every step and the argmaxes."""
    key = np.zeros(cache_shape, np.float32)
    value = np.zeros(cache_shape, np.float32)
    logits: list[np.ndarray] = []
    chosen: list[int] = []
    token = None
    for position in range(len(tokens) + feed_back):
        token = tokens[position] if position < len(tokens) else chosen[-1]
        out, key, value = step(np.array([token], np.int64), np.array([position], np.int64), key, value)
        logits.append(np.asarray(out, np.float32).reshape(-1))
        chosen.append(int(np.argmax(logits[-1])))
    return np.stack(logits), chosen


def _loop_full(call, tokens, feed_back: int):
    sequence = list(tokens)
    for _ in range(feed_back):
        sequence.append(int(np.argmax(call(np.asarray(sequence, np.int64))[-1])))
    logits = np.asarray(call(np.asarray(sequence, np.int64)), np.float32)
    return logits, [int(i) for i in np.argmax(logits, axis=-1)]


def main(runtime: str, path: str, request_path: str, result_path: str, cache_shape: str) -> None:
    shape = tuple(int(n) for n in cache_shape.split(",")) if cache_shape else ()
    if runtime == "torch-export-full":
        call = _torch_loader(path, full=True)
    else:
        step = {"torch-export": lambda: _torch_loader(path, full=False), "onnxruntime": lambda: _onnx_loader(path),
                "executorch": lambda: _executorch_loader(path)}[runtime]()
    request = np.load(request_path)
    count, new_tokens = int(request["prompts"]), int(request["new_tokens"])
    result = {}
    for i in range(count):
        prompt, approved = request[f"prompt_{i}"], request[f"approved_{i}"]
        forced_tokens = np.concatenate([prompt, approved])
        if runtime == "torch-export-full":
            result[f"forced_{i}"] = _loop_full(call, forced_tokens, 0)[0]
            chosen = _loop_full(call, prompt, new_tokens)[1]
        else:
            result[f"forced_{i}"] = _loop_step(step, shape, forced_tokens, 0)[0]
            chosen = _loop_step(step, shape, prompt, new_tokens - 1)[1]
        result[f"generated_{i}"] = np.asarray(chosen[len(prompt) - 1:len(prompt) - 1 + new_tokens], np.int64)
    leaked = sorted(name for name in ("transformers", "export_check", "models") if name in sys.modules)
    result["leaked"] = np.asarray(",".join(leaked))
    with open(result_path, "wb") as handle:
        np.savez(handle, **result)


if __name__ == "__main__":
    main(*sys.argv[1:6])
