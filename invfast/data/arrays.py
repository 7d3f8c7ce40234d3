"""Images from a ``.npy`` file (the ``npy:FILE`` data spec), checked once where the file is read.

The file must hold one array ``[N, 3, H, W]`` or ``[N, H, W, 3]`` (N, H, W >= 1) of:

- ``uint8``: pixels 0..255, as they are;
- ``uint16``: 16-bit images, scaled 0..65535 -> 0..255 (÷ 257, rounded), as 16-bit image files are;
- any other integer type (``int8`` ... ``int64``, ``uint32``, ``uint64``): read by its range, as 32-bit
  integer image files are: values in 0..255 as they are, values up to 65535 as 16-bit (÷ 257); negative
  values or values above 65535 are refused (the scale cannot be told);
- ``float16``/``float32``/``float64``: 0..1, or already 0..255, by their range (NaN/Inf refused;
  :class:`invfast.data.ArraySource`).

Anything else (``bool``, complex, strings, Python objects — never unpickled —, structured arrays, another
rank, an empty array, a file that is not a ``.npy`` array) is one ``ValueError`` naming the file, what it
holds and what is accepted.
"""

from __future__ import annotations

import os

import numpy as np

from invfast.data.protocol import integer_scale

__all__ = ["ACCEPTED", "read_image_array"]

ACCEPTED = (
    "[N, 3, H, W] or [N, H, W, 3] arrays of uint8 (0..255), uint16 (16-bit, 0..65535), other integers "
    "in 0..255 or 0..65535, or float in 0..1 or 0..255"
)
_FIX = "convert them before numpy.save (e.g. images.astype(numpy.uint8) for pixels in 0..255)"


def _header(path: str) -> tuple[tuple[int, ...], np.dtype] | None:
    """(shape, dtype) from the file's ``.npy`` header without reading the data; None for header versions
    this reader does not parse itself (numpy.load checks them)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in read:
            return None
        shape, _, dtype = read[version](f)
    return tuple(shape), dtype


def _check_header(path: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """ValueError for a dtype or shape that cannot be images (before the data is read)."""
    ok_dtype = (dtype.kind in "iu" and dtype.fields is None) or (dtype.kind == "f" and dtype.itemsize <= 8)
    if not ok_dtype:
        what = "Python objects (never unpickled)" if dtype.hasobject else f"{dtype} values"
        raise ValueError(f"{path!r} holds {what}; images must be {ACCEPTED}; {_FIX}")
    if len(shape) != 4 or 3 not in (shape[1], shape[-1]):
        raise ValueError(f"{path!r} holds an array of shape {list(shape)}; images must be {ACCEPTED}")
    if 0 in shape:
        raise ValueError(f"{path!r} holds no images (shape {list(shape)}); images must be {ACCEPTED}")


def _to_uint8(arr: np.ndarray, path: str) -> np.ndarray:
    """Integer pixels as uint8: uint16 always as 16-bit, other integer types by their range."""
    lo, hi = int(arr.min()), int(arr.max())
    divisor = 257 if arr.dtype == np.uint16 else int(integer_scale(lo, hi, f"the images of {path!r}"))
    if divisor == 1:
        return arr.astype(np.uint8)
    # a / 257 rounded, in integers (never exactly halfway: 257 is odd)
    return ((arr.astype(np.uint32) * 2 + 257) // 514).astype(np.uint8)


def read_image_array(path: str | os.PathLike) -> np.ndarray:
    """The images in ``.npy`` file ``path``: uint8 (integer files converted, see the module docstring) or
    float (0..1 or 0..255, checked by :class:`invfast.data.ArraySource`), of a shape ``ArraySource`` takes.

    Raises FileNotFoundError when there is no such file and ValueError (one line naming the file) for
    anything that is not such an array."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"array file {p!r} does not exist")
    try:
        head = _header(p)
    except (OSError, EOFError, ValueError) as e:
        raise ValueError(_unreadable(p, e)) from None
    if head is not None:
        _check_header(p, *head)
    try:
        arr = np.load(p, allow_pickle=False)
    except (OSError, EOFError, ValueError) as e:  # cut short, or a header version read only by numpy
        raise ValueError(_unreadable(p, e)) from None
    _check_header(p, arr.shape, arr.dtype)
    return _to_uint8(arr, p) if arr.dtype.kind in "iu" and arr.dtype != np.uint8 else arr


def _unreadable(path: str, e: BaseException) -> str:
    reason = " ".join(str(e).split())[:200]
    return f"cannot read {path!r} as a .npy array ({reason}); write the images with numpy.save(path, images)"
