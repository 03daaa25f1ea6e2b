"""A compiled program function as compiled callers take it: its C entry point, looked up once.

Why: the simulator, `predict_rows` and `predict_rows_grad` take a candidate as a first-class
function argument. Handed a numba dispatcher, numba looks up two addresses of the compiled
function on every call (~45 us: type hashing and an LLVM symbol lookup; ~1,200 calls in one
full evaluation), then calls it through numba's own calling convention, which costs an
atomic reference-count update per array argument and row. Through numba's wrapper-address
protocol the caller gets the function's C wrapper address, looked up once here, and calls
that: the same compiled code and the same values (tests compare them bit for bit), with
`predict_rows` and `predict_rows_grad` about twice as fast per row.

The C wrapper does not propagate Python exceptions; a validated program raises none (its
arithmetic follows numpy's error model: NaN and inf, which every caller checks). Programs are
compiled without a CPython wrapper of their own (~35 ms less per compilation): a call from
Python goes through `python_call`, a compiled caller that takes the handle.
"""
from __future__ import annotations

from numba.experimental.function_type import _get_wrapper_address

__all__ = ["AddressedFunction", "NativeFunction"]


class AddressedFunction:
    """What compiled callers need of a compiled function: its first-class type (`ftype`), the
    address of its C entry point (`_address`) and, from Python, a compiled caller
    (`python_call`). `NativeFunction` (numba) and `evaluator.llvm_program.LLVMFunction` fill them."""

    __slots__ = ()

    @property
    def _numba_type_(self):
        """How numba types this object as an argument (numba's typeof protocol)."""
        return self.ftype

    def __wrapper_address__(self) -> int:
        """numba's wrapper-address protocol: the C wrapper, looked up once."""
        return self._address

    def __call__(self, *args):
        """From Python, through `python_call` (the compiled code has no CPython wrapper)."""
        if self.python_call is None:
            raise TypeError("this compiled function is for compiled callers only")
        return self.python_call(self, *args)


class NativeFunction(AddressedFunction):
    """A numba dispatcher compiled for one first-class function type, passed by address."""

    __slots__ = ("dispatcher", "ftype", "python_call", "_address")

    def __init__(self, dispatcher, ftype, python_call=None):
        self.dispatcher = dispatcher  # keeps the compiled code (and so the address) alive
        self.ftype = ftype
        self.python_call = python_call  # python_call(handle, *args): the function called from Python
        self._address = _get_wrapper_address(dispatcher, ftype.signature)


    def __reduce__(self):
        return NativeFunction, (self.dispatcher, self.ftype, self.python_call)
