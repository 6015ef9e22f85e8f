"""torch's PrivateUse1 backend set up from Python, with the arena's NumPy kernels. torch can
rename PrivateUse1 once per process, so each test runs in a fresh interpreter."""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter with torch per test

PRELUDE = """
import json, numpy as np, torch
from retorch.dispatch.torch_privateuse1 import TorchArenaBackend, raw_of
"""


def run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tensors_on_the_renamed_device_run_our_kernels_forward_and_backward():
    got = run("""
        b = TorchArenaBackend("retorch")
        x = torch.arange(6.0, dtype=torch.float64).reshape(2, 3).to("retorch")
        made = list(b.calls); b.calls.clear()
        x.requires_grad_()
        y = (x @ x.t()).relu().sum()
        fwd = list(b.calls); b.calls.clear()
        y.backward()
        tx = torch.arange(6.0, dtype=torch.float64).reshape(2, 3).requires_grad_()
        (tx @ tx.t()).relu().sum().backward()
        print(json.dumps({
            "name": torch._C._get_privateuse1_backend_name(), "device": str(x.device),
            "keys": repr(torch._C._dispatch_keys(x)), "made": made, "fwd": fwd,
            "bwd": b.calls, "y": y.cpu().item(), "grad": x.grad.cpu().tolist(),
            "want": tx.grad.tolist(), "owns": b.allocator.owns(raw_of(x.grad)),
            "is_retorch": x.is_retorch}))
    """)
    assert got["name"] == "retorch" and got["device"] == "retorch:0" and got["is_retorch"]
    assert got["keys"] == (
        "DispatchKeySet(PrivateUse1, ADInplaceOrView, AutogradPrivateUse1, AutocastPrivateUse1)"
    )
    assert got["made"] == ["empty_strided", "_copy_from"]
    assert got["fwd"] == ["t", "mm", "relu", "sum"]
    assert got["bwd"][:3] == ["ones_like", "expand", "threshold_backward"]
    assert got["y"] == 83.0 and got["grad"] == got["want"] and got["owns"]


def test_an_op_without_a_kernel_fails_naming_the_backend():
    got = run("""
        b = TorchArenaBackend("npu_like")
        x = torch.ones(2).to("npu_like")
        try:
            x.exp()
            err = "no error"
        except NotImplementedError as e:
            err = str(e).split(". ")[0]
        b.destroy()
        try:
            torch.ones(2).to("npu_like")
            after = "no error"
        except NotImplementedError as e:
            after = str(e).split(". ")[0]
        print(json.dumps({"err": err, "after": after}))
    """)
    assert got["err"] == "Could not run 'aten::exp.out' with arguments from the 'npu_like' backend"
    assert got["after"].startswith("Could not run 'aten::empty_strided'")


def test_renaming_twice_fails_and_same_name_is_a_no_op():
    got = run("""
        from retorch.dispatch.torch_privateuse1 import setup_torch_backend
        setup_torch_backend("retorch")
        setup_torch_backend("retorch")
        try:
            setup_torch_backend("other")
            err = "no error"
        except RuntimeError as e:
            err = str(e)
        print(json.dumps({"err": err}))
    """)
    assert "can be renamed once only" in got["err"]


def test_at_exit_retorch_waits_for_the_device_threads_last_task():
    """The exit hook (``wait_for_device_thread``) is registered, and it returns only after the
    device's worker thread has finished the node it was running (a slow backward started on
    another thread): it queues behind whatever that thread does. That the abort at exit
    (pytorch#38228) goes away is measured (19 of 60 runs under load before, 0 of 60 after),
    not tested here: it is a race."""
    got = run("""
        import atexit, threading, time
        from retorch.dispatch import torch_privateuse1 as tp

        registered, real = [], atexit.register
        atexit.register = lambda f, *a: registered.append(f.__name__) or real(f, *a)
        b = TorchArenaBackend("retorch")
        atexit.register = real
        started, done = threading.Event(), []

        class Slow(torch.autograd.Function):
            @staticmethod
            def forward(ctx, w):
                return torch._C._acc.create_empty_tensor((1,), torch.float32)

            @staticmethod
            def backward(ctx, grad):
                started.set(); time.sleep(0.5); done.append(threading.current_thread().name)
                return None

        def step():
            out = Slow.apply(torch.zeros(1, requires_grad=True))
            torch.autograd.backward(out, torch._C._acc.create_empty_tensor((1,), torch.float32))

        t = threading.Thread(target=step, name="caller"); t.start(); started.wait()
        tp.wait_for_device_thread()
        finished_first = list(done)
        t.join()
        print(json.dumps({"registered": registered, "finished_first": finished_first}))
    """)
    assert "wait_for_device_thread" in got["registered"]
    assert len(got["finished_first"]) == 1  # the slow backward ended before the wait did
    assert got["finished_first"] != ["caller"]  # and it ran on the engine's device thread
