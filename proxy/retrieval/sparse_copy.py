"""Copy a folder whose files are mostly holes without filling the holes in.

The embedded engine sizes its files ahead of their data (a one-chunk collection is 156 MB of file
length and 0.3 MB of disk), and every ingest and every gateway worker copies a collection
(``Generations``, ``ReaderCopies``). ``shutil.copyfile`` copies the zeros a hole reads as, so each
copy would take the full length on disk; the standard library has no sparse copy (coreutils' ``cp``
does, but not on every platform prefixgate runs on), so this walks the data ranges with
``SEEK_DATA``/``SEEK_HOLE`` and copies only those, in the kernel where it can (``copy_file_range``).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

_STEP = 8 << 20  # bytes per read/write where the kernel cannot copy a range itself
# Where copy_file_range is refused, the bytes are read and written instead: across file systems (EXDEV), kernels or
# file systems without it (ENOSYS, EOPNOTSUPP, EINVAL), and sandboxes whose seccomp filter answers EPERM (some
# container runtimes do) or a file system that refuses it for these files (EPERM, EACCES).
_READ_AND_WRITE_INSTEAD = frozenset({errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM,
                                     errno.EACCES})


def _data_ranges(descriptor: int, size: int) -> list[tuple[int, int]]:
    """(start, end) of every run of data; the whole file where the file system cannot tell holes."""
    ranges = []
    offset = 0
    while offset < size:
        try:
            start = os.lseek(descriptor, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                break
            return [(0, size)]  # SEEK_DATA unsupported here: copy everything
        end = os.lseek(descriptor, start, os.SEEK_HOLE)
        ranges.append((start, end))
        offset = end
    return ranges


def _copy_range(source: int, target: int, start: int, end: int) -> None:
    offset = start
    while offset < end:
        count = min(_STEP, end - offset)
        if hasattr(os, "copy_file_range"):
            try:
                copied = os.copy_file_range(source, target, count, offset, offset)
            except OSError as exc:
                if exc.errno not in _READ_AND_WRITE_INSTEAD:
                    raise
                copied = os.pwrite(target, os.pread(source, count, offset), offset)
        else:
            copied = os.pwrite(target, os.pread(source, count, offset), offset)
        if copied == 0:  # the file shrank under us: what is left reads as nothing
            return
        offset += copied


def copy_sparse(source: str | Path, target: str | Path) -> None:
    """Copy one file's data and length, leaving its holes holes, and its mode (a ``copy_function``)."""
    with open(source, "rb") as reading, open(target, "wb") as writing:
        size = os.fstat(reading.fileno()).st_size
        for start, end in _data_ranges(reading.fileno(), size):
            _copy_range(reading.fileno(), writing.fileno(), start, end)
        os.ftruncate(writing.fileno(), size)
    shutil.copymode(source, target)


def copy_tree(source: Path, target: Path) -> None:
    """``shutil.copytree`` with ``copy_sparse`` for each file."""
    shutil.copytree(source, target, copy_function=copy_sparse)
