"""Pointers inside Numba-CUDA kernels: an address as an array, and 16-byte loads and stores.

torch's CUDA kernels receive raw pointers (``char* data[ntensors]`` in ``CUDALoops.cuh``,
``void* addresses[depth][n]`` in ``MultiTensorApply.cuh``) and load 16 bytes at a time where
the pointers allow it (``aligned_vector<scalar_t, vec_size>`` and ``can_vectorize_up_to``,
``aten/src/ATen/native/cuda/MemoryAccess.cuh``). Numba-CUDA has neither: its kernels take
arrays (7 kernel parameters each, typed and marshalled at every launch) and load one element
at a time. This module adds both, so one kernel source serves the GPU and the simulator:

* :func:`array_at` ``(address, n, zero)``: the ``n`` elements at the int64 ``address`` (what
  ``tensor.data_ptr()`` returns) as a 1-D array of ``zero``'s type (``inttoptr``, then the
  array ``numba.carray`` builds). ``zero`` stands for the dtype, as a template parameter.
* :func:`load4` ``(array, i)`` and :func:`store4` ``(array, i, x0, x1, x2, x3)``: elements
  ``i .. i + 3`` as 16-byte accesses (``ld.global.v4.f32`` / ``st.global.v4.f32``; a float64
  quad is two ``ld.global.v2.f64``), inline PTX as numba-cuda's ``cache_hints.py`` writes it.
  The address must be a multiple of 16 (:func:`aligned`), as the hardware requires.
* :func:`load2` ``(array, i)`` and :func:`store2` ``(array, i, x0, x1)``: elements ``i, i + 1``
  as ONE vector access of two elements (``ld.global.v2.f32``, 8 bytes, or ``ld.global.v2.f64``,
  16 bytes): torch's ``aligned_vector<scalar_t, 2>``, which it uses where a pointer is aligned
  to two elements but not four (float32), and for every aligned float64 operand. The address
  must be a multiple of two elements' bytes.

With the simulator on (no GPU: "device" memory is host memory), the same names are
plain Python: a NumPy view of the address through ctypes, and slices that raise, as a GPU
faults ("misaligned address"), when the address is not a multiple of 16. The choice is made
once, when this module is imported; :data:`SIMULATED` says which.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir
from numba import types

from .cuda import simulator_enabled

#: True when the names below are the simulator's stand-ins (Python), False for intrinsics.
SIMULATED = simulator_enabled()

#: Bytes of one vector access: what ``ld.global.v4.f32`` moves, and its alignment.
VECTOR_BYTES = 16


def aligned(address, nbytes=VECTOR_BYTES):
    """Whether ``address`` is a multiple of ``nbytes`` (``can_vectorize_up_to``'s test);
    plain arithmetic, so callable on the host and inside a kernel."""
    return address % nbytes == 0


if SIMULATED:

    def _address(array) -> int:
        base = getattr(array, "_ary", array)  # a simulator device array wraps a NumPy one
        return base.__array_interface__["data"][0]

    def array_at(address, n, zero):
        """The simulator's ``array_at``: a NumPy view of ``n`` elements at ``address``."""
        if not isinstance(zero, np.generic):
            raise TypeError(
                f"array_at takes the dtype from a NumPy scalar (np.float32(0)), got "
                f"{type(zero).__name__}: a Python float would be float64 here but float32 in a "
                "kernel compiled for float32"
            )
        dtype = np.asarray(zero).dtype
        if n == 0:
            return np.empty(0, dtype)
        # int(): an address read from a device table arrives as a NumPy integer
        buffer = (ctypes.c_byte * (int(n) * dtype.itemsize)).from_address(int(address))
        return np.frombuffer(buffer, dtype=dtype, count=n)

    def _quad(array, i):
        address = _address(array) + i * array.dtype.itemsize
        if address % VECTOR_BYTES:
            raise RuntimeError(
                f"misaligned address: a 16-byte vector access at {address:#x}, which is not a "
                "multiple of 16 (a GPU raises cudaErrorMisalignedAddress)"
            )
        if not 0 <= i <= array.shape[0] - 4:
            raise IndexError(f"vector access to elements {i}..{i + 3} of {array.shape[0]}")

    def _pair(array, i):
        alignment = 2 * array.dtype.itemsize
        address = _address(array) + i * array.dtype.itemsize
        if address % alignment:
            raise RuntimeError(
                f"misaligned address: a {alignment}-byte vector access at {address:#x}, which "
                f"is not a multiple of {alignment} (a GPU raises cudaErrorMisalignedAddress)"
            )
        if not 0 <= i <= array.shape[0] - 2:
            raise IndexError(f"vector access to elements {i}..{i + 1} of {array.shape[0]}")

    def load2(array, i):
        """The simulator's ``load2``: ``array[i:i + 2]`` as a tuple (two elements aligned)."""
        _pair(array, i)
        return array[i], array[i + 1]

    def store2(array, i, x0, x1):
        """The simulator's ``store2``: ``array[i:i + 2] = x0, x1`` (two elements aligned)."""
        _pair(array, i)
        array[i] = x0
        array[i + 1] = x1

    def load4(array, i):
        """The simulator's ``load4``: ``array[i:i + 4]`` as a tuple (16-byte aligned)."""
        _quad(array, i)
        return array[i], array[i + 1], array[i + 2], array[i + 3]

    def store4(array, i, x0, x1, x2, x3):
        """The simulator's ``store4``: ``array[i:i + 4] = x0, x1, x2, x3`` (16-byte aligned)."""
        _quad(array, i)
        array[i] = x0
        array[i + 1] = x1
        array[i + 2] = x2
        array[i + 3] = x3

else:
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic
    from numba.cuda.np.arrayobj import make_array, populate_array

    #: PTX register constraint and type suffix per element type; (elements per instruction).
    _PTX = {types.float32: ("f", "f32", 4), types.float64: ("d", "f64", 2)}

    def _vector_type(array):
        if not isinstance(array, types.Array) or array.ndim != 1 or array.dtype not in _PTX:
            raise TypeError(f"16-byte accesses take a 1-D float32/float64 array, got {array}")

    def _element_pointer(context, builder, array_type, array, index_type, index):
        index = context.cast(builder, index, index_type, types.intp)
        ary = make_array(array_type)(context, builder, array)
        return cgutils.get_item_pointer(context, builder, array_type, ary, [index])

    @intrinsic
    def array_at(typingctx, address, n, zero):
        """``(T*) address`` viewed as ``n`` elements: inttoptr, then carray's array struct."""
        if not isinstance(address, types.Integer) or not isinstance(n, types.Integer):
            raise TypeError(f"array_at(address, n, zero) takes integers, got {address}, {n}")
        if not isinstance(zero, (types.Float, types.Integer, types.Boolean)):
            raise TypeError(f"array_at's zero gives the element type, got {zero}")
        array_type = types.Array(zero, 1, "C")

        def codegen(context, builder, sig, args):
            element = context.get_data_type(zero)
            data = builder.inttoptr(args[0], element.as_pointer())
            size = context.cast(builder, args[1], sig.args[1], types.intp)
            itemsize = cgutils.intp_t(context.get_abi_sizeof(element))
            out = make_array(array_type)(context, builder)
            populate_array(
                out, data=data, shape=[size], strides=[itemsize], itemsize=itemsize, meminfo=None
            )
            return out._getvalue()

        return array_type(address, n, zero), codegen

    @intrinsic
    def load4(typingctx, array, i):
        """Elements ``i .. i + 3`` in 16-byte loads: one ``ld.global.v4.f32`` (float32) or
        two ``ld.global.v2.f64`` (float64)."""
        _vector_type(array)
        dtype = array.dtype
        reg, suffix, per = _PTX[dtype]

        def codegen(context, builder, sig, args):
            element = context.get_value_type(dtype)
            ptr = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            operands = ", ".join(f"${k}" for k in range(per))
            asm = ir.InlineAsm(
                ir.FunctionType(ir.LiteralStructType([element] * per), [element.as_pointer()]),
                f"ld.global.v{per}.{suffix} {{{operands}}}, [${per}];",
                ",".join([f"={reg}"] * per + ["l"]),
            )
            values = []
            for first in range(0, 4, per):
                loaded = builder.call(asm, [builder.gep(ptr, [cgutils.int32_t(first)])])
                values += [builder.extract_value(loaded, k) for k in range(per)]
            return context.make_tuple(builder, sig.return_type, values)

        return types.UniTuple(dtype, 4)(array, i), codegen

    @intrinsic
    def store4(typingctx, array, i, x0, x1, x2, x3):
        """``array[i .. i + 3] = x0 .. x3`` in 16-byte stores (``st.global.v4.f32``, or two
        ``st.global.v2.f64``); the values are cast to the array's type first."""
        _vector_type(array)
        dtype = array.dtype
        reg, suffix, per = _PTX[dtype]

        def codegen(context, builder, sig, args):
            element = context.get_value_type(dtype)
            ptr = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            values = [context.cast(builder, v, t, dtype) for v, t in zip(args[2:], sig.args[2:])]
            operands = ", ".join(f"${k + 1}" for k in range(per))
            asm = ir.InlineAsm(
                ir.FunctionType(ir.VoidType(), [element.as_pointer()] + [element] * per),
                f"st.global.v{per}.{suffix} [$0], {{{operands}}};",
                ",".join(["l"] + [reg] * per),
                side_effect=True,
            )
            for first in range(0, 4, per):
                at = builder.gep(ptr, [cgutils.int32_t(first)])
                builder.call(asm, [at, *values[first : first + per]])
            return context.get_dummy_value()

        return types.void(array, i, x0, x1, x2, x3), codegen

    @intrinsic
    def load2(typingctx, array, i):
        """Elements ``i, i + 1`` in one vector load: ``ld.global.v2.f32`` (8 bytes, float32) or
        ``ld.global.v2.f64`` (16 bytes, float64), torch's ``aligned_vector<scalar_t, 2>``."""
        _vector_type(array)
        dtype = array.dtype
        reg, suffix, _ = _PTX[dtype]

        def codegen(context, builder, sig, args):
            element = context.get_value_type(dtype)
            ptr = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            asm = ir.InlineAsm(
                ir.FunctionType(ir.LiteralStructType([element] * 2), [element.as_pointer()]),
                f"ld.global.v2.{suffix} {{$0, $1}}, [$2];",
                f"={reg},={reg},l",
            )
            loaded = builder.call(asm, [ptr])
            values = [builder.extract_value(loaded, k) for k in range(2)]
            return context.make_tuple(builder, sig.return_type, values)

        return types.UniTuple(dtype, 2)(array, i), codegen

    @intrinsic
    def store2(typingctx, array, i, x0, x1):
        """``array[i], array[i + 1] = x0, x1`` in one vector store (``st.global.v2.f32`` or
        ``st.global.v2.f64``); the values are cast to the array's type first."""
        _vector_type(array)
        dtype = array.dtype
        reg, suffix, _ = _PTX[dtype]

        def codegen(context, builder, sig, args):
            element = context.get_value_type(dtype)
            ptr = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            values = [context.cast(builder, v, t, dtype) for v, t in zip(args[2:], sig.args[2:])]
            asm = ir.InlineAsm(
                ir.FunctionType(ir.VoidType(), [element.as_pointer(), element, element]),
                f"st.global.v2.{suffix} [$0], {{$1, $2}};",
                f"l,{reg},{reg}",
                side_effect=True,
            )
            builder.call(asm, [ptr, *values])
            return context.get_dummy_value()

        return types.void(array, i, x0, x1), codegen
