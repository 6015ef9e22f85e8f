"""A kernel exercise's stub, run under Numba's CUDA simulator, still says "not implemented yet"
first and the stub's own sentence next: the simulator's thread ids come after it (issue 32)."""

from __future__ import annotations

import numpy as np
import pytest

from retorch.testing.grading import CheckFailed, check


@pytest.mark.simulator
def test_a_kernel_stub_message_puts_the_sentence_before_the_thread_ids():
    from numba import cuda

    from retorch.cuda import kernel

    @kernel("void(float32[:])")
    def stub(x):
        raise NotImplementedError("Exercise 4 (relu_kernel): replace this with your code")

    def run(cmp):
        stub[1, 2](cuda.to_device(np.zeros(2, np.float32)))

    with pytest.raises(CheckFailed) as info:
        check("Exercise 4 (relu_kernel)", run)
    msg = str(info.value)
    assert msg.startswith("Exercise 4 (relu_kernel): not implemented yet. Your function still ")
    assert "NotImplementedError (Exercise 4 (relu_kernel): replace this with your code; " in msg
    assert "raised by thread [" in msg and "under the simulator" in msg and "tid=" not in msg
