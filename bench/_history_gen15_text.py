"""The JUnit one job of the fifteenth history uploads, as pytest (8.x, ``junit_family`` xunit2, its
default: no ``file`` attribute) writes it under pytest-xdist ``-n 3`` (no rerun plugin: PEFT's CI
has none, so each test is one ``<testcase>``), and the failure texts its causes write: pytest's long
traceback form (the test's source line, ``file:line:`` separators, ``E`` lines) with the message
pytest puts in ``message``.

Contract: `junit_xml` escapes every attribute and text; its counts match its cases; a `Failure`'s
``message`` is the ``E`` line's text without the ``E`` prefix.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from xml.sax.saxutils import escape, quoteattr

from bench._history_gen15_world import Case

RULE = "_ " * 40


@dataclass(frozen=True)
class Failure:
    """One failed case's ``<failure>`` (``error`` for a setup error: pytest's ``<error>``)."""

    message: str
    text: str
    error: bool = False


def _traceback(case: Case, rng: random.Random, frames: list[tuple[str, str]], lines: list[str]) -> str:
    call = f"self.{case.name.split('[')[0].removeprefix('test_')}" if case.cls else "model(**inputs)"
    head = [f"self = <{case.classname} object at 0x7f{rng.randrange(16**10):010x}>" if case.cls else "",
            "", f"    def {case.name.split('[')[0]}(self{', model_id, config_cls, config_kwargs' if '[' in case.name else ''}):",
            f">       {call}(...)", "", f"{case.file}:{rng.randint(40, 1900)}: ", RULE]
    for where, code in frames:
        head += [f"{where}:{rng.randint(30, 2400)}: in {code.split('(')[0].split('.')[-1] or 'forward'}", f"    {code}"]
    return "\n".join([*head, *(f"E   {line}" for line in lines)])


def failure(cause: str, case: Case, rng: random.Random, detail: str = "") -> Failure:
    """The text pytest writes for ``case`` failing of ``cause``; ``detail`` a cause's own word
    (the window's error, the PR's touched source file, the crashed worker)."""
    if cause == "window":
        lines = detail.split("\n")
        return Failure(lines[0], _traceback(case, rng, [("src/peft/peft_model.py", "outputs = self.base_model(*args, **kwargs)")], lines))
    if cause == "new":
        msg = rng.choice([f"AssertionError: assert {rng.randint(2, 64)} == {rng.randint(65, 128)}",
                          "TypeError: forward() got an unexpected keyword argument 'adapter_names'",
                          "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x16 and 8x16)",
                          "KeyError: 'base_model.model.lin0.lora_A.default.weight'"])
        return Failure(msg, _traceback(case, rng, [(detail or "src/peft/tuners/tuners_utils.py", "result = self._forward(x)")], [msg]))
    if cause == "tolerance":
        diff = rng.uniform(1.1e-5, 9e-4)
        lines = ["AssertionError: Tensor-likes are not close!", "",
                 f"Mismatched elements: {rng.randint(1, 6)} / {rng.choice([256, 1024, 4096])} (0.{rng.randint(1, 9)}%)",
                 f"Greatest absolute difference: {diff:.6g} at index ({rng.randint(0, 3)}, {rng.randint(0, 63)}) (up to 1e-05 allowed)",
                 f"Greatest relative difference: {diff * rng.uniform(5, 40):.6g} at index ({rng.randint(0, 3)}, {rng.randint(0, 63)}) (up to 1.3e-06 allowed)"]
        return Failure(lines[0], _traceback(case, rng, [("tests/testing_common.py", "assert_close(logits_merged, logits_unmerged, atol=atol, rtol=rtol)")], lines))
    if cause == "winlock":
        msg = ("PermissionError: [WinError 32] The process cannot access the file because it is being used by "
               f"another process: 'C:\\\\Users\\\\runneradmin\\\\AppData\\\\Local\\\\Temp\\\\tmp{rng.randrange(16**8):08x}\\\\adapter_model.safetensors'")
        return Failure(msg, _traceback(case, rng, [("C:\\hostedtoolcache\\windows\\Python\\3.12.10\\x64\\Lib\\tempfile.py", "_rmtree(name, onexc=onexc)")], [msg]))
    if cause == "timing":
        msg = f"AssertionError: assert {rng.uniform(1.6, 3.0):.2f} < 1.5"
        return Failure(msg, _traceback(case, rng, [("tests/testing_utils.py", "assert elapsed < max_time")], [msg, " +  where elapsed = time_it(...)"]))
    if cause == "hub":
        code = rng.choice(["502 Server Error: Bad Gateway", "504 Server Error: Gateway Time-out",
                           "503 Server Error: Service Unavailable"])
        model = detail or "peft-internal-testing/tiny-random-OPTForCausalLM"
        lines = [f"OSError: There was a specific connection error when trying to load {model}:",
                 f"{code} for url: https://huggingface.co/{model}/resolve/main/config.json"]
        return Failure(lines[0], _traceback(case, rng, [("/opt/hostedtoolcache/Python/3.11.13/x64/lib/python3.11/site-packages/transformers/utils/hub.py", "raise OSError(")], lines))
    if cause == "disk":
        msg = "OSError: [Errno 28] No space left on device"
        return Failure(msg, _traceback(case, rng, [("/opt/hostedtoolcache/Python/3.11.13/x64/lib/python3.11/site-packages/safetensors/torch.py", "serialize_file(_flatten(tensors), filename, metadata=metadata)")], [msg]))
    if cause == "crash":
        msg = f"worker '{detail}' crashed while running '{case.node}'"
        return Failure(msg, f"[{detail}] node down: Not properly terminated\n{msg}")
    if cause == "xid":
        lines = ["RuntimeError: CUDA error: unspecified launch failure",
                 "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
                 "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"]
        return Failure(lines[0], _traceback(case, rng, [("/opt/conda/envs/peft/lib/python3.11/site-packages/torch/nn/modules/linear.py", "return F.linear(input, self.weight, self.bias)")], lines))
    raise ValueError(f"unknown failure cause {cause!r}")


def _case_xml(case: Case, seconds: float, fail: Failure | None, skip: str) -> str:
    head = f'<testcase classname={quoteattr(case.classname)} name={quoteattr(case.name)} time="{seconds:.3f}"'
    if fail is not None:
        tag = "error" if fail.error else "failure"
        return f"{head}><{tag} message={quoteattr(fail.message)}>{escape(fail.text)}</{tag}></testcase>"
    if skip:
        return f'{head}><skipped type="pytest.skip" message={quoteattr(skip)}>{escape(case.file)}:1: {escape(skip)}</skipped></testcase>'
    return f"{head} />"


def junit_xml(cases: list[Case], failures: dict[str, Failure], skips: dict[str, str], hostname: str,
              started: datetime, rng: random.Random) -> str:
    """One pytest run's JUnit: ``cases`` in the order xdist finished them, ``failures`` and
    ``skips`` keyed by node."""
    order = list(cases)
    rng.shuffle(order)  # pytest-xdist writes cases as workers finish them
    times = [round(rng.lognormvariate(-1.5, 1.2), 3) for _ in order]
    body = [_case_xml(c, t, failures.get(c.node), skips.get(c.node, "")) for c, t in zip(order, times)]
    failed = sum(1 for c in order if c.node in failures and not failures[c.node].error)
    errors = sum(1 for c in order if c.node in failures and failures[c.node].error)
    skipped = sum(1 for c in order if c.node not in failures and c.node in skips)
    wall = sum(times) / 3 + rng.uniform(20, 60)
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" '
            f'errors="{errors}" failures="{failed}" skipped="{skipped}" tests="{len(order)}" time="{wall:.3f}" '
            f'timestamp="{started.isoformat(timespec="microseconds")}" hostname={quoteattr(hostname)}>'
            + "".join(body) + "</testsuite></testsuites>")
