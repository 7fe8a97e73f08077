"""Where an archive lives: a local path, or an fsspec URL (a universal-pathlib ``UPath``).

Local paths stay plain strings, opened with ``os`` calls: reading a local archive never
imports fsspec or universal-pathlib (~40 ms), which matters for short-lived processes
(command lines, DataLoader workers). The ``UPath`` of a local archive is built on request.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from upath import UPath

__all__ = ["Location"]

_LOCAL_PROTOCOLS = frozenset({"", "file", "local"})


def _is_upath(location: object) -> bool:
    # Without importing universal-pathlib: nothing can be a UPath before it was imported.
    upath = sys.modules.get("upath")
    return upath is not None and isinstance(location, upath.UPath)


def _is_url(text: str) -> bool:
    # "s3://bucket/key", "file:///tmp/x", chained "simplecache::s3://..."
    return "://" in text or "::" in text


class Location:
    """An archive's absolute location: :attr:`local` (an operating-system path) for local
    archives, :attr:`upath` (with its storage options) for any other fsspec filesystem."""

    __slots__ = ("_upath", "local")

    def __init__(
        self, location: str | PurePath | UPath | Location, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        self._upath: UPath | None
        self.local: str | None
        if storage_options:
            location = _with_options(location, storage_options)
        if isinstance(location, Location):
            self.local, self._upath = location.local, location._upath
        elif _is_upath(location) or (isinstance(location, str) and _is_url(location)):
            from upath import UPath

            upath = location if isinstance(location, UPath) else UPath(location)
            _refuse_unsafe_links(str(upath))
            local = upath.protocol in _LOCAL_PROTOCOLS
            self._upath = upath.absolute() if local else upath
            self.local = str(self._upath.path) if local else None
        else:
            self.local, self._upath = os.path.abspath(os.fspath(location)), None  # type: ignore[arg-type]

    @property
    def upath(self) -> UPath:
        """The location as a ``UPath`` (for local archives, built on first use)."""
        if self._upath is None:
            from upath import UPath

            assert self.local is not None  # a location without a UPath is a local one
            self._upath = UPath(self.local)
        return self._upath

    @property
    def storage_options(self) -> dict[str, Any]:
        return {} if self.local is not None else dict(self.upath.storage_options)

    @property
    def name(self) -> str:
        """The location as people write it: a path for local files, a URL otherwise."""
        return self.local if self.local is not None else str(self.upath)

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
    elif isinstance(location, str) and _is_url(location) and not location.startswith(("file:", "local:")):
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
