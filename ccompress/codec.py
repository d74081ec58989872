"""Codecs: stateless wire formats named by spec strings (see cuda/include/ccompress/codec.h
for each format's bit layout, rounding, bound and size formula)."""
from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from ._internal import arrays as _arrays
from . import _core
from ._internal.errors import InvalidArgument, MessageError


class Codec:
    """A wire format, e.g. ``Codec("fp8_e4m3:g128")`` (the same as ``Codec.parse``).

    ``encode(x)`` gives the exact bytes a collective sends for ``x``;
    ``decode(buf, n, dtype)`` reads them back; ``roundtrip(x)`` does both;
    ``wire_bytes(n, dtype)`` is the exact encoded size of n elements.

    Parameters
    ----------
    spec : str or Codec
        A codec spec (``"none"``, ``"bf16"``, ``"fp8_e4m3:g128"``, ``"nvfp4"``, ...; README's
        codec table lists them), or a Codec.

    Raises
    ------
    InvalidArgument
        An unknown codec, option or value in ``spec``.
    """

    __slots__ = ("_c",)

    def __init__(self, spec: Union[str, "Codec", "_core.Codec"]):
        if isinstance(spec, _core.Codec):
            self._c = spec
        else:
            self._c = Codec.parse(spec)._c

    @staticmethod
    def parse(spec: Union[str, "Codec"]) -> "Codec":
        """Parses a codec spec.

        Parameters
        ----------
        spec : str or Codec
            A spec string ("none", "bf16", "fp16", "fp8_e4m3:g128", "fp8_e5m2:g64", ...); a Codec
            is returned as it is.

        Returns
        -------
        Codec
            The codec, its name canonical (``str(codec)``).

        Raises
        ------
        InvalidArgument
            ``spec`` is not a string or Codec, names an unknown codec or option, or is
            ``"auto8"`` / ``"auto4"`` (chosen per call by a communicator, not a codec).
        """
        if isinstance(spec, Codec):
            return spec
        if not isinstance(spec, str):
            raise InvalidArgument(f"codec must be a spec string or Codec, got {type(spec).__name__}")
        if spec in ("auto8", "auto4"):
            raise InvalidArgument(f"{spec} is chosen per call from the data by a communicator: "
                                  f"pass codec={spec!r} to allreduce (or simulate.allreduce)")
        return Codec(_core.Codec.parse(spec))

    @property
    def name(self) -> str:
        """The canonical spec, e.g. ``"fp8_e4m3:g128"`` (what :meth:`parse` gives back).

        Returns
        -------
        str
            The name.
        """
        return self._c.name

    @property
    def group(self) -> int:
        """Elements per scale group.

        Returns
        -------
        int
            The group size; 0 for unscaled codecs.
        """
        return self._c.group

    def lossy(self, dtype: str = "float32") -> bool:
        """Whether a round trip can change values of this dtype.

        Parameters
        ----------
        dtype : {"float32", "bfloat16", "float16"}, default "float32"
            The element type.

        Returns
        -------
        bool
            False only where every value comes back bit for bit (e.g. ``"none"``, or ``"bf16"``
            for bfloat16).
        """
        return self._c.lossy(dtype)

    def wire_bytes(self, n: int, dtype: str = "float32") -> int:
        """Exact encoded size of ``n`` elements of ``dtype``.

        Parameters
        ----------
        n : int
            The element count.
        dtype : {"float32", "bfloat16", "float16"}, default "float32"
            The element type (it matters only for "none", which sends the elements as they are).

        Returns
        -------
        int
            Bytes on the wire, scales and padding included (no message header).

        Raises
        ------
        InvalidArgument
            ``n`` is negative.
        """
        if n < 0:
            raise InvalidArgument(f"element count {n} is negative")
        return self._c.bind(dtype).wire_bytes(int(n))

    def encode(self, x: Any) -> np.ndarray:
        """The encoded bytes of ``x`` (flattened), exactly what a collective sends.

        Parameters
        ----------
        x : array
            A host array (NumPy, or any DLPack producer in host memory) of float32, bfloat16 or
            float16.

        Returns
        -------
        numpy.ndarray
            uint8, ``wire_bytes(x.size, dtype)`` bytes.

        Raises
        ------
        InvalidArgument
            An array of an unsupported dtype, layout or memory.
        """
        v = _arrays.view(x)
        c = self._c.bind(v.dtype)
        buf = np.empty(c.wire_bytes(v.n), dtype=np.uint8)
        _core.encode(c, v.ptr, v.dtype, v.n, 1.0, buf.ctypes.data)
        return buf

    def decode(self, buf: Any, n: int, dtype: str = "float32") -> np.ndarray:
        """Decodes ``n`` elements from ``buf`` into a new array.

        Parameters
        ----------
        buf : bytes-like
            The encoded bytes (:meth:`encode`), exactly ``wire_bytes(n, dtype)`` of them.
        n : int
            The element count.
        dtype : {"float32", "bfloat16", "float16"}, default "float32"
            The output type (for "none", also the type on the wire).

        Returns
        -------
        numpy.ndarray
            ``n`` elements of ``dtype``.

        Raises
        ------
        InvalidArgument
            An unsupported dtype, or ``buf`` of another size than the codec needs.
        """
        if dtype not in _arrays.SUPPORTED:
            raise InvalidArgument(f"dtype {dtype}; {_arrays._HINT}")
        c = self._c.bind(dtype)
        raw = np.ascontiguousarray(np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8))
        need = c.wire_bytes(int(n))
        if raw.size != need:
            raise InvalidArgument(f"{self.name} needs exactly {need} bytes for {n} elements, "
                                  f"got {raw.size}")
        out = np.empty(int(n), dtype=_arrays.numpy_dtype(dtype))
        _core.decode(c, raw.ctypes.data, int(n), out.ctypes.data, dtype)
        return out

    def encode_message(self, x: Any, call: int = 0) -> np.ndarray:
        """``x`` framed as a collective sends it: the 16-byte message header (magic, version,
        dtype, codec id, element count, call number; see cuda/src/collectives/message_header.h)
        followed by ``encode(x)``.

        Parameters
        ----------
        x : array
            A host array of float32, bfloat16 or float16.
        call : int, default 0
            The call number the header carries.

        Returns
        -------
        numpy.ndarray
            uint8: the header, then the payload.

        Raises
        ------
        InvalidArgument
            An array of an unsupported dtype, layout or memory.
        """
        v = _arrays.view(x)
        head = _core.message_header(self._c.bind(v.dtype), v.dtype, v.n, int(call))
        return np.concatenate([np.frombuffer(head, np.uint8), self.encode(x)])

    def decode_message(self, buf: Any, n: Optional[int] = None, dtype: str = "float32",
                       call: Optional[int] = None) -> np.ndarray:
        """Checks and decodes a framed message (:meth:`encode_message`) from untrusted bytes.

        Nothing is decoded or allocated before the header and size checks pass.

        Parameters
        ----------
        buf : bytes-like
            The message: header, then payload.
        n : int, optional
            The element count the header must carry (default: the header's count).
        dtype : {"float32", "bfloat16", "float16"}, default "float32"
            The type the header must carry, and the output's.
        call : int, optional
            The call number the header must carry (default: any).

        Returns
        -------
        numpy.ndarray
            The decoded elements.

        Raises
        ------
        MessageError
            The header does not carry this codec, ``dtype``, ``n`` or ``call`` (the message names
            the field and both values), or the payload is not exactly ``wire_bytes(count)``.
        InvalidArgument
            An unsupported ``dtype``.
        """
        if dtype not in _arrays.SUPPORTED:
            raise InvalidArgument(f"dtype {dtype}; {_arrays._HINT}")
        raw = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
        hb = _core.MESSAGE_HEADER_BYTES
        if raw.size < hb:
            raise MessageError(f"malformed message: {raw.size} bytes, shorter than the "
                               f"{hb}-byte message header")
        got = raw[:hb].tobytes()
        fields = _core.parse_message_header(got)
        count = fields["count"] if n is None else int(n)
        c = self._c.bind(dtype)
        want = _core.message_header(c, dtype, count, fields["call"] if call is None else call)
        _core.check_message_header(got, want)
        need = c.wire_bytes(count)
        if raw.size - hb != need:
            raise MessageError(f"malformed message: {self.name} needs {need} payload bytes for "
                               f"{count} elements, got {raw.size - hb}")
        return self.decode(raw[hb:], count, dtype)

    def roundtrip(self, x: Any) -> Any:
        """decode(encode(x)): what every receiver of ``x`` reads.

        Parameters
        ----------
        x : array
            A host array of float32, bfloat16 or float16.

        Returns
        -------
        array
            The round trip, with the shape and array type of ``x``.

        Raises
        ------
        InvalidArgument
            An array of an unsupported dtype, layout or memory.
        """
        v = _arrays.view(x)
        c = self._c.bind(v.dtype)
        buf = np.empty(c.wire_bytes(v.n), dtype=np.uint8)
        out = _arrays.empty_like(x, v.shape, v.dtype)
        ov = _arrays.view(out, "out", writable=True)
        _core.encode(c, v.ptr, v.dtype, v.n, 1.0, buf.ctypes.data)
        _core.decode(c, buf.ctypes.data, v.n, ov.ptr, v.dtype)
        return _arrays.like_input(x, out)

    def __repr__(self) -> str:
        return f"Codec({self.name!r})"

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Codec) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)
