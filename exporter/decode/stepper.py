"""Step one reloaded decode artifact token by token, as an app would: a standalone script.

Run as ``python -I stepper.py RUNTIME FILE REQUEST.npz RESULT.npz [CACHE_SHAPE]``, in a fresh interpreter that
imports the runtime and numpy and nothing of export_check or of the model's architecture (``transformers`` loaded
here is an error); or, as :mod:`export_check.decode.stepping` runs it, forked per file from a host started as
``python -I stepper.py --serve RUNTIME [EXTRA]`` that imported only the runtime (``serve``), so a check's files
of one runtime pay its import once.
For each prompt of the request it runs two loops through the file:

* teacher-forced: prompt + approved continuation fed one token per step, the logits of every position
  kept (``forced_<i>``, shape ``(P + N, vocab)``);
* free-running greedy: the prompt prefilled a token per step, then the argmax fed back ``N - 1`` times
  (``generated_<i>``, shape ``(N,)``).

The greedy loop is fed the same tokens as the teacher-forced one, from the same cache, for as long as
each argmax equals the approved token: up to there its steps are the teacher-forced steps, computed
once. At the first step whose argmax differs, greedy goes on alone from a copy of the cache after that
step (the runner's ``.pte``, whose cache cannot be copied, runs that prompt's greedy loop afresh). The
full forward (``torch-export-full``) recomputes the whole sequence per token, whose numbers depend on
its length: its greedy loop is always its own.

With ``executorch-runner`` and text prompts, ExecuTorch's own ``TextLLMRunner`` also generates from
each prompt's text with the set's tokenizer (``runner_<i>``: the text it generated, or NUL and the error it raised).

Runtimes: ``torch-export`` / ``onnxruntime`` / ``executorch`` call the decode step
``(input_ids, position, past_key, past_value) -> (logits, present_key, present_value)`` with a
zero cache of ``CACHE_SHAPE`` (``L,H,S,D``) at the start of each loop; ``torch-export-full`` calls
the full forward on the whole sequence each step (no cache: what the single-forward check ships);
``executorch-runner`` calls ``forward(tokens, input_pos) -> logits``, the cache inside the program.
"""

from __future__ import annotations

import sys

import numpy as np


def _torch_loader(path: str, full: bool):
    import torch

    if "torchao" in sys.argv[6:7]:  # a weight-only int8 or int4 file: torchao registers the ops and tensor types it holds
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


def _executorch_runner(path: str):
    """The runner's .pte stepped by its ``forward(tokens, input_pos)``: the cache lives inside, so each loop loads the method afresh."""
    import torch
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(path)

    def fresh():
        method = program.load_method("forward")

        def step(token, position, key, value):
            out = method.execute([torch.from_numpy(token)[None], torch.from_numpy(position)])
            return out[0].numpy(), key, value
        return step
    return fresh


def _runner_texts(path: str, tokenizer: str, texts, new_tokens: int) -> list[str]:
    """ExecuTorch's own generation (``TextLLMRunner``, greedy): the text of each prompt's continuation."""
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    runner = TextLLMRunner(path, tokenizer)
    out = []
    for text in texts:
        runner.reset()
        pieces: list[str] = []
        try:
            runner.generate(str(text), GenerationConfig(echo=False, max_new_tokens=new_tokens, temperature=0.0, num_bos=0, num_eos=0),
                            token_callback=pieces.append)
        except Exception as exc:  # e.g. a token that is not whole UTF-8 cannot cross the runner's Python callback
            out.append(f"\0{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        out.append("".join(pieces))
    return out


def _loop_step(step, cache_shape, tokens, feed_back: int, start=None):
    """Feed ``tokens`` a step each, then ``feed_back`` argmaxes; the logits of every step and the argmaxes. ``start``:
    ``(position, key, value)`` to go on from (the cache after ``position - 1``), else position 0 and a zero cache."""
    first, key, value = start or (0, np.zeros(cache_shape, np.float32), np.zeros(cache_shape, np.float32))
    logits: list[np.ndarray] = []
    chosen: list[int] = []
    for position in range(first, len(tokens) + feed_back):
        token = tokens[position] if position < len(tokens) else chosen[-1]
        out, key, value = step(np.array([token], np.int64), np.array([position], np.int64), key, value)
        logits.append(np.array(out, np.float32).reshape(-1))  # a copy: a runtime may write its next output into the same memory
        chosen.append(int(np.argmax(logits[-1])))
    return np.stack(logits), chosen


def _forced_and_greedy(step, cache_shape, prompt, approved, new_tokens: int, rerun=None):
    """The teacher-forced logits over prompt + approved and the greedy continuation, stepping once where they share
    their steps (the module's docstring). ``rerun``: a fresh step for a greedy loop from the start, when the cache
    cannot be copied."""
    tokens = np.concatenate([prompt, approved])
    key, value = np.zeros(cache_shape, np.float32), np.zeros(cache_shape, np.float32)
    logits: list[np.ndarray] = []
    generated: list[int] = []
    for position in range(len(tokens)):
        out, key, value = step(np.array([tokens[position]], np.int64), np.array([position], np.int64), key, value)
        logits.append(np.array(out, np.float32).reshape(-1))
        done = position - len(prompt) + 1  # greedy tokens chosen before this step
        if 0 <= done < new_tokens and len(generated) == done:
            generated.append(int(np.argmax(logits[-1])))
            if done + 1 < new_tokens and generated[-1] != approved[done]:  # greedy leaves the approved tokens here
                if rerun is not None:
                    generated = _loop_step(rerun(), cache_shape, prompt, new_tokens - 1)[1][len(prompt) - 1:]
                else:  # copies: the continuation's steps must not write into the cache the forced loop goes on with
                    key, value = np.array(key, copy=True), np.array(value, copy=True)
                    start = (position + 1, key.copy(), value.copy())
                    generated += _loop_step(step, cache_shape, [*tokens[:position + 1], generated[-1]], new_tokens - done - 2, start)[1]
    return np.stack(logits), generated[:new_tokens]


def _loop_full(call, tokens, feed_back: int):
    sequence = list(tokens)
    for _ in range(feed_back):
        sequence.append(int(np.argmax(call(np.asarray(sequence, np.int64))[-1])))
    logits = np.asarray(call(np.asarray(sequence, np.int64)), np.float32)
    return logits, [int(i) for i in np.argmax(logits, axis=-1)]


def main(runtime: str, path: str, request_path: str, result_path: str, cache_shape: str) -> None:
    shape = tuple(int(n) for n in cache_shape.split(",")) if cache_shape else ()
    fresh = None
    if runtime == "torch-export-full":
        call = _torch_loader(path, full=True)
    elif runtime == "executorch-runner":
        fresh = _executorch_runner(path)
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
            chosen = _loop_full(call, prompt, new_tokens)[1][len(prompt) - 1:]
        else:
            result[f"forced_{i}"], chosen = _forced_and_greedy(fresh() if fresh else step, shape, prompt, approved, new_tokens, fresh)
        result[f"generated_{i}"] = np.asarray(chosen[:new_tokens], np.int64)
    if runtime == "executorch-runner" and "tokenizer" in request.files:
        texts = _runner_texts(path, str(request["tokenizer"]), request["texts"], new_tokens)
        result.update({f"runner_{i}": np.asarray(text) for i, text in enumerate(texts)})
    leaked = sorted(name for name in ("transformers", "export_check", "models") if name in sys.modules)
    result["leaked"] = np.asarray(",".join(leaked))
    with open(result_path, "wb") as handle:
        np.savez(handle, **result)


def _preload(runtime: str, extra: str) -> None:
    """What ``runtime``'s files need, imported once by a host (``serve``) before it forks a child per file."""
    if runtime != "onnxruntime":
        import torch  # noqa: F401
    if extra == "torchao":
        import torchao  # noqa: F401
    if runtime.startswith("executorch"):
        from executorch.runtime import Runtime  # noqa: F401
    if runtime == "onnxruntime":
        import onnxruntime  # noqa: F401


def serve(runtime: str, extra: str) -> None:
    """A host of ``runtime`` (with ``extra``): its libraries imported once, then per request line on stdin (a JSON list:
    the five ``main`` arguments, the extra, and a file for the child's output), a forked child that steps that file and
    nothing else, as a fresh ``python -I stepper.py`` would; this prints ``pid N`` once it forked and ``exit CODE`` once the
    child ended (the parent kills a child past its time by that pid). It ends when stdin closes."""
    import json
    import os
    import traceback

    _preload(runtime, extra)
    for line in sys.stdin:
        args = json.loads(line)
        output = args.pop()
        pid = os.fork()
        if pid == 0:  # the child: one file, its output to its own file, never to the host's pipe
            code = 1
            try:
                fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                sys.argv = [__file__, *args]  # _torch_loader reads the extra where a fresh child has it
                main(*args[:5])
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"exit {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
    else:
        main(*sys.argv[1:6])
