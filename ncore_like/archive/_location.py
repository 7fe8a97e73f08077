"""Where an archive lives: local paths and fsspec URLs, as universal-pathlib ``UPath``s."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from upath import UPath

__all__ = ["display_name", "fresh_upath", "local_path", "to_upath"]

_LOCAL_PROTOCOLS = frozenset({"", "file", "local"})


def to_upath(location: str | PurePath | UPath) -> UPath:
    """The absolute ``UPath`` of a local path or URL (storage options of a ``UPath`` kept)."""
    upath = location if isinstance(location, UPath) else UPath(location)
    if upath.protocol in _LOCAL_PROTOCOLS:
        return upath.absolute()
    return upath


def local_path(upath: UPath) -> str | None:
    """The operating-system path of a local location, ``None`` for remote ones."""
    if upath.protocol in _LOCAL_PROTOCOLS:
        return str(upath.path)
    return None


def display_name(upath: UPath) -> str:
    """The location as people write it: a path for local files, a URL otherwise."""
    return local_path(upath) or str(upath)


def fresh_upath(upath: UPath) -> UPath:
    """A new ``UPath`` of the same location and options, with its own filesystem object
    (fsspec filesystem objects of a parent process are unusable after ``fork``)."""
    options: dict[str, Any] = dict(upath.storage_options)
    fresh: UPath = UPath(str(upath), **options)
    return fresh
