"""The typed description of one C kernel's arguments, and the wire format
the generic harness (harness_c.py, on the host and on the M7) reads and writes.

A kernel's arguments are declared in the order the harness reads them from
stdin; `call` then names the C function's parameters in order:

* `Scalar(name, ctype)`: one value, sent raw (little-endian);
* `Array(name, ctype, length, role)`: sent as a uint32 element count and, for
  IN / INOUT, the elements.  `length` is a Python expression over the
  case's scalars (and LENGTH_HELPERS) that the case's arrays must match; the
  harness allocates OUT / SCRATCH arrays of that many elements filled with
  FILL_BYTE, so an element a kernel forgets to write shows up.  OUT and INOUT
  arrays are written back to stdout (the first `checked` elements are
  compared; the rest is room the contract lets the kernel scribble on), SCRATCH
  arrays are not.  `nullable`: a count of 0 passes NULL (optional bias).
* `Struct(name, ctype, fields)`: a C struct built from earlier arguments by
  designated initializer ((C field, argument) pairs) and passed as &name;
  `write_back` sends its fields to stdout after the call, so with it the
  fields must be scalars; a struct that is both written back and points at
  arrays (tllm_topk) names those in `pointers`, which are initialized but
  not written back (the arrays come back through their own role).

`elementwise` kernels take scalars only: the harness reads a count N, then N
values of each scalar, calls the function N times and writes N results.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from tinyllm_gen.quant.formats import q4x4_bytes_of, x16_stream_bytes

# C type -> little-endian numpy dtype.  Bits are compared through the
# unsigned integer view of the same width, floats included.
DTYPES: Mapping[str, str] = {
    "float": "<f4", "int8_t": "i1", "uint8_t": "u1", "int16_t": "<i2", "uint16_t": "<u2",
    "int32_t": "<i4", "uint32_t": "<u4", "uint64_t": "<u8",
}
FILL_BYTE = 0x5A


class Role(enum.Enum):
    IN = "in"
    OUT = "out"
    INOUT = "inout"
    SCRATCH = "scratch"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# Names a length expression may use besides the case's scalars.
LENGTH_HELPERS: Mapping[str, Callable[..., int]] = {
    "cdiv": _cdiv,
    "ceil4": lambda n: _cdiv(n, 4) * 4,
    "x16_bytes": x16_stream_bytes,
    "q4x4_bytes": q4x4_bytes_of,
    "max": max,
    "min": min,
}


@dataclass(frozen=True)
class Scalar:
    name: str
    ctype: str


@dataclass(frozen=True)
class Array:
    name: str
    ctype: str
    length: str
    role: Role = Role.IN
    nullable: bool = False
    checked: str | None = None  # elements compared (OUT/INOUT); default: all

    @property
    def returned(self) -> bool:
        return self.role in (Role.OUT, Role.INOUT)

    @property
    def sent(self) -> bool:
        return self.role in (Role.IN, Role.INOUT)


@dataclass(frozen=True)
class Struct:
    name: str
    ctype: str
    fields: tuple[tuple[str, str], ...]  # (C field, argument name)
    write_back: bool = False
    pointers: tuple[tuple[str, str], ...] = ()  # (C field, array argument): initialized, never written back


Arg = Scalar | Array | Struct


def In(name: str, ctype: str, length: str, nullable: bool = False) -> Array:
    return Array(name, ctype, length, Role.IN, nullable)


def Out(name: str, ctype: str, length: str, checked: str | None = None) -> Array:
    return Array(name, ctype, length, Role.OUT, checked=checked)


def InOut(name: str, ctype: str, length: str) -> Array:
    return Array(name, ctype, length, Role.INOUT)


def Scratch(name: str, ctype: str, length: str) -> Array:
    return Array(name, ctype, length, Role.SCRATCH)


def struct_of(name: str, ctype: str, write_back: bool = False, pointers: Mapping[str, str] | None = None,
              **fields: str) -> Struct:
    return Struct(name, ctype, tuple(fields.items()), write_back, tuple((pointers or {}).items()))


Values = Mapping[str, object]


@dataclass(frozen=True)
class Case:
    """One input: `make(rng)` builds every scalar and IN/INOUT array by name
    (numpy arrays of the declared dtype, or lists); the seed is fixed so a
    failing case reproduces by its label."""

    label: str
    make: Callable[[np.random.Generator], dict]
    seed: int = 0
    # A known disagreement between the C and its twin, stated so that it stays
    # visible (the test expects the case to fail, strictly) until it is fixed.
    known_difference: str = ""
    m7_difference: str = ""  # the same, on the Cortex-M7 only (tests/emu/test_kernel_twins_m7.py)

    def values(self) -> dict:
        return self.make(np.random.default_rng(self.seed))


@dataclass(frozen=True)
class Kernel:
    """One C kernel, its header and its numpy twin.

    `twin(values)` returns the expected OUT/INOUT arrays and write-back
    struct fields by argument name (a struct's field as "struct.field") and
    the return value as "return"."""

    name: str
    header: str
    args: tuple[Arg, ...]
    call: tuple[str, ...]
    twin: Callable[[Values], dict]
    cases: tuple[Case, ...]
    returns: str | None = None  # the C return type, compared as "return"
    elementwise: bool = False

    def arg(self, name: str) -> Arg:
        return next(a for a in self.args if a.name == name)

    def scalar_type(self, name: str) -> str:
        a = self.arg(name)
        assert isinstance(a, Scalar)
        return a.ctype


def length_of(expr: str, scalars: Mapping[str, object]) -> int:
    n = eval(expr, {"__builtins__": {}}, {**LENGTH_HELPERS, **scalars})  # noqa: S307 - our own declarations
    return int(n)


def scalars_of(k: Kernel, values: Values) -> dict:
    return {a.name: int(values[a.name]) if DTYPES[a.ctype][1] in "iu" else values[a.name]
            for a in k.args if isinstance(a, Scalar)}


def _array(values: Values, a: Array) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values[a.name]).astype(DTYPES[a.ctype], copy=False))


def encode(k: Kernel, values: Values) -> bytes:
    """The harness's stdin for one call."""
    if k.elementwise:
        cols = [np.asarray(values[a.name]).astype(DTYPES[a.ctype]) for a in k.args]
        n = len(cols[0])
        assert all(len(c) == n for c in cols), f"{k.name}: elementwise inputs of unequal length"
        return struct.pack("<I", n) + b"".join(c.tobytes() for c in cols)
    scalars = scalars_of(k, values)
    out = bytearray()
    for a in k.args:
        if isinstance(a, Scalar):
            out += np.asarray(values[a.name]).astype(DTYPES[a.ctype]).tobytes()
        elif isinstance(a, Array):
            want = length_of(a.length, scalars)
            if a.sent:
                arr = _array(values, a)
                got = arr.size
                if not (a.nullable and got == 0):
                    assert got == want, f"{k.name}: {a.name} has {got} elements, its length {a.length} says {want}"
                out += struct.pack("<I", got) + arr.tobytes()
            else:
                out += struct.pack("<I", want)
    return bytes(out)


def decode(k: Kernel, values: Values, raw: bytes) -> dict:
    """The harness's stdout, split into named arrays (and "return")."""
    got, at = {}, 0

    def take(name: str, ctype: str, n: int):
        nonlocal at
        dt = np.dtype(DTYPES[ctype])
        got[name] = np.frombuffer(raw, dt, n, at)
        at += n * dt.itemsize

    if k.elementwise:
        take("return", k.returns, len(np.asarray(values[k.args[0].name])))
    else:
        scalars = scalars_of(k, values)
        for a in k.args:
            if isinstance(a, Array) and a.returned:
                n = np.asarray(values[a.name]).size if a.role is Role.INOUT else length_of(a.length, scalars)
                take(a.name, a.ctype, n)
            elif isinstance(a, Struct) and a.write_back:
                for fname, arg in a.fields:
                    take(f"{a.name}.{fname}", k.scalar_type(arg), 1)
        if k.returns:
            take("return", k.returns, 1)
    assert at == len(raw), f"{k.name}: harness wrote {len(raw)} bytes, the declaration reads {at}"
    return got


def output_bytes(k: Kernel, values: Values) -> int:
    """How many bytes the harness writes for this call (decode's count)."""
    def size(ctype: str) -> int:
        return np.dtype(DTYPES[ctype]).itemsize

    if k.elementwise:
        return len(np.asarray(values[k.args[0].name])) * size(k.returns)
    scalars, n = scalars_of(k, values), 0
    for a in k.args:
        if isinstance(a, Array) and a.returned:
            count = np.asarray(values[a.name]).size if a.role is Role.INOUT else length_of(a.length, scalars)
            n += count * size(a.ctype)
        elif isinstance(a, Struct) and a.write_back:
            n += sum(size(k.scalar_type(arg)) for _, arg in a.fields)
    return n + (size(k.returns) if k.returns else 0)


def expected(k: Kernel, values: Values) -> dict:
    """The twin's outputs as arrays of the declared dtypes, cut to `checked`."""
    want = k.twin(values)
    scalars = {} if k.elementwise else scalars_of(k, values)
    out = {}
    for name, v in want.items():
        if name == "return":
            ctype = k.returns
        elif "." in name:
            s, f = name.split(".")
            ctype = k.scalar_type(dict(k.arg(s).fields)[f])
        else:
            ctype = k.arg(name).ctype
        arr = np.asarray(v)
        if np.dtype(DTYPES[ctype]).kind == "f":
            assert arr.dtype == np.float32, f"{k.name}: twin output {name} is {arr.dtype}, not float32"
        out[name] = np.ascontiguousarray(arr.astype(DTYPES[ctype])).reshape(-1)
        arrays = {a.name: a for a in k.args if isinstance(a, Array)}
        if name in arrays and arrays[name].checked is not None:
            out[name] = out[name][: length_of(arrays[name].checked, scalars)]
    return out


def bits(a: np.ndarray) -> np.ndarray:
    """The unsigned integer view: equal bits, not equal values (-0.0 != 0.0)."""
    a = np.ascontiguousarray(a)
    return a.view(f"<u{a.dtype.itemsize}") if a.dtype.itemsize > 1 else a.view(np.uint8)
