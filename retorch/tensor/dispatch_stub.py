"""DispatchStub: one kernel per device for one op. Mirrors
``aten/src/ATen/native/DispatchStub.h`` (``DECLARE_DISPATCH`` / ``REGISTER_DISPATCH``).

An ATen op such as ``add.out`` is written once for every device: it builds a TensorIterator,
then calls ``add_stub(iter.device_type(), iter, alpha)``; the stub holds a function pointer
per device type, filled in by the CPU and CUDA kernel files. :data:`STUBS` is that table
(op name -> {device: kernel}), which a later dispatcher can read to route ops by device.
"""

from __future__ import annotations


class DispatchStub:
    def __init__(self, name: str):
        self.name = name
        self.table: dict[str, object] = {}

    def register(self, device: str, fn=None):
        """``REGISTER_DISPATCH(stub, fn)``; usable as a decorator."""

        def put(f):
            self.table[device] = f
            return f

        return put(fn) if fn is not None else put

    def __call__(self, device: str, *args, **kwargs):
        fn = self.table.get(device)
        if fn is None:
            raise NotImplementedError(f"{self.name}: no kernel registered for device type {device}")
        return fn(*args, **kwargs)

    def __repr__(self):
        return f"DispatchStub({self.name!r}, devices={sorted(self.table)})"


#: Every stub, by op name.
STUBS: dict[str, DispatchStub] = {}


def stub(name: str) -> DispatchStub:
    """``DECLARE_DISPATCH``: the stub named ``name`` (made on first use)."""
    if name not in STUBS:
        STUBS[name] = DispatchStub(name)
    return STUBS[name]
