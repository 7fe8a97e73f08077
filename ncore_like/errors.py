"""The errors of ncore_like, all in this module.

Every error derives from :class:`NcoreLikeError` and mixes in the builtin exception a
caller would naturally catch, so code that handles ``ValueError`` or ``KeyError`` keeps
working, while code that cares can catch the precise class. Messages name the archive (or
store) and what is wrong with it; the parts are also attributes (:attr:`~NcoreLikeError.archive`,
:attr:`~NcoreLikeError.key`, :attr:`~NcoreLikeError.detail`), so a program (e.g. the
command line, which names the archive once) never has to take a message apart. Those that
are ``OSError`` (:class:`RemoteStorageError`, :class:`UnfinishedArchiveError`) carry the
archive's path or URL as ``filename`` too, as Python's own file errors do; and a remote
object that is missing raises ``FileNotFoundError`` with its URL as ``filename`` and in
the message.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ArchiveClosedError",
    "ArchiveExistsError",
    "ArchiveFormatError",
    "ChecksumError",
    "ConsolidatedMetadataError",
    "EventLoopError",
    "InvalidKeyError",
    "MissingDependencyError",
    "NcoreLikeError",
    "NodeMetadataError",
    "ReadOnlyError",
    "RecordExistsError",
    "RemoteStorageError",
    "UnfinishedArchiveError",
]


def _restore(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    if isinstance(error, OSError):
        error.filename = state.get("archive")  # a slot of OSError's, not in __dict__
    return error


class NcoreLikeError(Exception):
    """The base of every error ncore_like raises.

    Args:
        detail: What is wrong (without the archive's name).
        archive: The archive or store concerned (its path or URL), if one is.
        key: The record concerned, if one is.
    """

    def __init__(self, detail: str = "", *, archive: str | None = None, key: str | None = None) -> None:
        super().__init__(f"{archive}: {detail}" if archive else detail)
        self.detail = detail
        """What is wrong, without the archive's name."""
        self.archive = archive
        """The archive or store concerned (path or URL), None if none is."""
        self.key = key
        """The record concerned, None if none is."""
        if isinstance(self, OSError):
            # Where Python's own errors of files say which file: code that reports an
            # OSError's ``filename`` names the archive (its path or URL) too.
            os_error: OSError = self
            os_error.filename = archive

    def __str__(self) -> str:
        # KeyError would quote the message; every error of ours reads as its message.
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors raised in worker processes arrive with their attributes, whatever the
        # constructor of the subclass.
        return (_restore, (type(self), self.args, dict(self.__dict__)))


class ArchiveFormatError(NcoreLikeError, ValueError):
    """A file is not a valid indexed tar archive (truncated, wrong magic, corrupt index...)."""


class ChecksumError(NcoreLikeError, ValueError):
    """A record's payload doesn't match the CRC32C checksum stored for it: the archive is
    damaged there (the payload is never handed out).

    Attributes:
        offset: File offset of the record's payload.
    """

    def __init__(self, detail: str = "", *, archive: str | None = None, key: str | None = None, offset: int = -1):
        super().__init__(detail, archive=archive, key=key)
        self.offset = offset


class ArchiveClosedError(NcoreLikeError, ValueError):
    """A record that is not held in memory was read from a closed archive."""


class ReadOnlyError(NcoreLikeError, ValueError):
    """A write was attempted on an archive, store or node opened for reading."""


class InvalidKeyError(NcoreLikeError, ValueError):
    """A record key is empty, absolute, or contains ``..`` components or NUL characters."""


class ConsolidatedMetadataError(NcoreLikeError, ValueError):
    """A consolidated metadata record can't be decoded."""


class UnfinishedArchiveError(NcoreLikeError, FileExistsError):
    """Writing an archive found the unfinished (partial) file of an earlier writer of the
    same name, which it never overwrites: recover it (:func:`ncore_like.recover`) or delete it."""


class ArchiveExistsError(NcoreLikeError, FileExistsError):
    """Exclusive creation (``mode="x"``/``"w-"``, ``ncore-like pack`` without
    ``--overwrite``, recovery) found a file or object at the archive's name, which it never
    replaces."""


class RemoteStorageError(NcoreLikeError, OSError):
    """Remote storage can't be used: no credentials, an endpoint that doesn't answer, access
    denied. The message names the location (never a credential) and what to check."""


class MissingDependencyError(NcoreLikeError, ImportError):
    """A location needs a package that isn't installed (e.g. ``s3fs`` for ``s3://``); the
    message names the extra to install."""


class NodeMetadataError(NcoreLikeError, ValueError):
    """A node's metadata (``.zarray``, ``.zgroup``, ``.zattrs``, ``zarr.json``) can't be
    understood: not JSON, or fields zarr-python rejects."""


class EventLoopError(NcoreLikeError, RuntimeError):
    """A blocking call was made on the thread of the event loop that has to run it (it
    would wait for itself forever); use the ``*_async`` method and ``await`` it instead."""


class RecordExistsError(NcoreLikeError, ValueError):
    """A record written to an archive exists already (records are write-once).

    Args:
        key: The key of the record that exists already.
        detail: What is wrong (default: that the record exists already).
        archive: The archive concerned.
    """

    def __init__(self, key: str, detail: str | None = None, *, archive: str | None = None) -> None:
        super().__init__(detail if detail is not None else f"record {key!r} exists already", archive=archive, key=key)
