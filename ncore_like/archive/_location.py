"""Where an archive lives: a local path, or an fsspec URL (a universal-pathlib ``UPath``).

Local paths stay plain strings, opened with ``os`` calls: reading a local archive never
imports fsspec or universal-pathlib (~40 ms), which matters for short-lived processes
(command lines, DataLoader workers). The ``UPath`` of a local archive is built on request.

:func:`is_url` is the one place that tells a URL from a path (the library, the command line
and archive collections ask it).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from upath import UPath

__all__ = ["PARTIAL_SUFFIX", "Location", "is_url", "partial_path"]

_LOCAL_PROTOCOLS = frozenset({"", "file", "local"})
# A protocol of two or more characters, then "://" or (a chained URL such as
# "simplecache::s3://bucket/key") "::": a Windows drive letter ("C:\...") is a path.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+(://|::)")


#: What the partial name of a local archive being written appends to its final name.
PARTIAL_SUFFIX = ".partial"


def partial_path(path: str) -> str:
    """The name a local archive has while it is written (``<final name>.partial``, in the
    same folder, so that the rename at the end is atomic)."""
    return path + PARTIAL_SUFFIX


def is_url(text: str) -> bool:
    """True for text that names a location by URL (``s3://...``, ``file:///...``, chained
    ``simplecache::s3://...``), False for an operating-system path."""
    return ":" in text and _URL.match(text) is not None  # most paths have no colon: no regex


def _is_upath(location: object) -> bool:
    # Without importing universal-pathlib: nothing can be a UPath before it was imported.
    upath = sys.modules.get("upath")
    return upath is not None and isinstance(location, upath.UPath)


class Location:
    """An archive's absolute location: :attr:`local` (an operating-system path) for local
    archives, :attr:`upath` (with its storage options) for any other fsspec filesystem."""

    __slots__ = ("_name", "_upath", "local")

    def __init__(
        self, location: str | PurePath | UPath | Location, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        self._upath: UPath | None
        self.local: str | None
        self._name: str | None = None  # str() of a UPath takes tens of microseconds: once
        if storage_options:
            location = _with_options(location, storage_options)
        if isinstance(location, Location):
            self.local, self._upath, self._name = location.local, location._upath, location._name
        elif _is_upath(location) or (isinstance(location, str) and is_url(location)):
            from upath import UPath

            upath = location if isinstance(location, UPath) else UPath(location)
            url = str(upath)
            _refuse_unsafe_links(url)
            local = upath.protocol in _LOCAL_PROTOCOLS
            self._upath = upath.absolute() if local else upath
            self.local = str(self._upath.path) if local else None
            if not local:
                self._name = url
        else:
            self.local, self._upath = os.path.abspath(os.fspath(location)), None  # type: ignore[arg-type]

    @classmethod
    def parse(cls, text: str, storage_options: Mapping[str, Any] | Sequence[tuple[str, Any]] = ()) -> Location:
        """The location a user typed (e.g. on a command line): a URL gets the storage
        options, a local path ignores them (warning about that is the caller's business)."""
        if is_url(text):
            from upath import UPath

            return cls(UPath(text, **dict(storage_options)))
        return cls(text)

    @property
    def upath(self) -> UPath:
        """The location as a ``UPath`` (for local archives, built on first use)."""
        if self._upath is None:
            from upath import UPath

            assert self.local is not None  # a location without a UPath is a local one
            self._upath = UPath(self.local)
        return self._upath

    @property
    def is_remote(self) -> bool:
        """True for locations that aren't local files."""
        return self.local is None

    @property
    def target(self) -> str | UPath:
        """The path of a local location, the ``UPath`` of others."""
        return self.local if self.local is not None else self.upath

    @property
    def storage_options(self) -> dict[str, Any]:
        return {} if self.local is not None else dict(self.upath.storage_options)

    @property
    def name(self) -> str:
        """The location as people write it: a path for local files, a URL otherwise."""
        name = self._name
        if name is None:
            name = self._name = self.local if self.local is not None else str(self.upath)
        return name

    def same_as(self, other: Location) -> bool:
        """True if both name the same file (compared by location, not by content)."""
        if self.local is not None or other.local is not None:
            return self.local == other.local
        return self.name == other.name and self.upath.protocol == other.upath.protocol

    def fresh_upath(self) -> UPath:
        """A new ``UPath`` of the same location and options, with its own filesystem object
        (fsspec filesystem objects of a parent process are unusable after ``fork``)."""
        from upath import UPath

        fresh: UPath = UPath(str(self.upath), **self.storage_options)
        return fresh

    def __reduce__(self) -> tuple[Any, ...]:
        if self.local is not None:
            return (Location, (self.local,))
        return (_remote_location, (str(self.upath), self.storage_options))

    def __repr__(self) -> str:
        return f"Location({self.name!r})"


def _with_options(location: str | PurePath | UPath | Location, options: Mapping[str, Any]) -> UPath:
    """A URL (or a ``UPath``, whose own options the given ones extend) with storage options;
    ValueError for local paths, which take none (options there would be silently ignored)."""
    from upath import UPath

    if isinstance(location, Location):
        location = location.local if location.local is not None else location.upath
    if _is_upath(location):
        upath: UPath = location  # type: ignore[assignment]
        if upath.protocol not in _LOCAL_PROTOCOLS:
            combined: UPath = UPath(str(upath), **{**upath.storage_options, **options})
            return combined
    elif isinstance(location, str) and is_url(location) and not location.startswith(("file:", "local:")):
        remote: UPath = UPath(location, **options)
        return remote
    raise ValueError(f"{location}: storage options apply to URLs (s3://, https://...), not to local paths")


#: fsspec filesystems that hand out wrong bytes under concurrent reads: the tar filesystem
#: reads every member through one shared file object, and reads run on many threads.
_UNSAFE_PROTOCOLS = frozenset({"tar"})


def _refuse_unsafe_links(url: str) -> None:
    """ValueError for URLs with a link (``tar://...::``) whose filesystem garbles concurrent reads."""
    for link in url.split("::"):
        protocol = link.partition("://")[0]  # a link of the protocol alone ("tar::...") is one too
        if protocol in _UNSAFE_PROTOCOLS:
            raise ValueError(
                f"{url}: fsspec's {protocol}:// filesystem reads every member through one shared file, which "
                f"concurrent reads garble; unpack the {protocol} file into a new folder (mkdir FOLDER && tar -xf "
                f"FILE -C FOLDER) and use its files"
            )


def _remote_location(url: str, storage_options: dict[str, Any]) -> Location:
    from upath import UPath

    return Location(UPath(url, **storage_options))
