"""The errors of ncore_like.

Each class mixes in the builtin exception a caller would naturally catch, so code that
handles ``ValueError`` or ``KeyError`` keeps working, while code that cares can catch the
precise class. Messages name the archive (or store) and what is wrong with it.
"""

from __future__ import annotations

__all__ = [
    "ArchiveClosedError",
    "ArchiveFormatError",
    "InvalidKeyError",
    "ReadOnlyError",
    "RecordExistsError",
]


class RecordExistsError(ValueError):
    """A record written to an archive exists already (records are write-once).

    Attributes:
        key: The key of the record that exists already.
    """

    def __init__(self, key: str, message: str | None = None) -> None:
        super().__init__(message if message is not None else f"record {key!r} exists already")
        self.key = key

    def __reduce__(self) -> tuple[type[RecordExistsError], tuple[str, str]]:
        # Keep ``key`` across pickling (e.g. errors raised in worker processes).
        return (type(self), (self.key, str(self)))


class ArchiveFormatError(ValueError):
    """A file is not a valid indexed tar archive (truncated, wrong magic, corrupt index...)."""


class ArchiveClosedError(ValueError):
    """A record that is not held in memory was read from a closed archive."""


class ReadOnlyError(ValueError):
    """A write was attempted on an archive or store opened for reading."""


class InvalidKeyError(ValueError):
    """A record key is empty, absolute, or contains ``..`` components or NUL characters."""
