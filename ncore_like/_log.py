"""The library's loggers, made on first use.

Importing :mod:`logging` costs ~5-8 ms, a noticeable share of a fresh process (a new
DataLoader worker) that opens an archive and reads a record, and logs nothing.
:func:`library_logger` returns a stand-in that becomes the real logger the first time
something is logged or asked of it. Before any of the library's loggers is made, the
``ncore_like`` logger gets a ``NullHandler``: nothing of ours prints until the application
configures logging (not even Python's last resort).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

__all__ = ["DEBUG", "library_logger", "quiet_library_root"]

DEBUG = 10  # logging.DEBUG, without importing logging for it


def quiet_library_root() -> None:
    """Gives the ``ncore_like`` logger its ``NullHandler`` (once)."""
    import logging

    root = logging.getLogger("ncore_like")
    if not any(isinstance(handler, logging.NullHandler) for handler in root.handlers):
        root.addHandler(logging.NullHandler())


class _LibraryLogger:
    """A :class:`logging.Logger` of the given name, made when first used."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: logging.Logger | None = None

    def __getattr__(self, attribute: str) -> Any:
        logger = self._logger
        if logger is None:
            quiet_library_root()
            import logging

            logger = self._logger = logging.getLogger(self._name)
        return getattr(logger, attribute)


def library_logger(name: str) -> logging.Logger:
    """The logger ``name`` (under ``ncore_like``): the real one if logging is imported
    already, else a stand-in that makes it on first use."""
    if "logging" in sys.modules:
        quiet_library_root()
        return sys.modules["logging"].getLogger(name)  # type: ignore[no-any-return]
    return _LibraryLogger(name)  # type: ignore[return-value]
