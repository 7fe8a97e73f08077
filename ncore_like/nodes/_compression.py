"""``BloscCompression``: the one compression the typed API writes (other codec chains are
described by :func:`ncore_like.store._documents.describe_codecs`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    import numcodecs

__all__ = ["BloscCompression", "BloscConfigV3", "Cname", "Shuffle"]

Cname = Literal["blosclz", "lz4", "lz4hc", "zlib", "zstd"]
Shuffle = Literal["noshuffle", "shuffle", "bitshuffle"]
BloscConfigV3 = Mapping[str, Any]
_CNAMES: tuple[str, ...] = get_args(Cname)
_SHUFFLES: tuple[str, ...] = get_args(Shuffle)  # index = numcodecs' shuffle constant


@dataclass(frozen=True)
class BloscCompression:
    """Blosc compression of array chunks (default: lz4, level 5, bit-shuffle, automatic
    block size)."""

    cname: Cname = "lz4"
    """Compressor used by blosc."""
    clevel: int = 5
    """Compression level, 0 (none) to 9 (maximum)."""
    shuffle: Shuffle = "bitshuffle"
    """Shuffle filter applied before compression."""
    blocksize: int = 0
    """Block size in bytes (0: automatic)."""

    def __post_init__(self) -> None:
        if self.cname not in _CNAMES:
            raise ValueError(f"unknown blosc compressor {self.cname!r} (expected one of {', '.join(_CNAMES)})")
        if isinstance(self.clevel, bool) or not isinstance(self.clevel, int) or not 0 <= self.clevel <= 9:
            raise ValueError(f"blosc clevel must be an int from 0 to 9, got {self.clevel!r}")
        if self.shuffle not in _SHUFFLES:
            raise ValueError(f"unknown blosc shuffle {self.shuffle!r} (expected one of {', '.join(_SHUFFLES)})")
        if isinstance(self.blocksize, bool) or not isinstance(self.blocksize, int) or self.blocksize < 0:
            raise ValueError(f"blosc blocksize must be a non-negative int, got {self.blocksize!r}")

    @property
    def shuffle_id(self) -> int:
        """numcodecs' constant of :attr:`shuffle` (0, 1, 2)."""
        return _SHUFFLES.index(self.shuffle)

    def to_numcodecs(self) -> numcodecs.Blosc:
        """The equivalent numcodecs codec (zarr format 2's compressor)."""
        import numcodecs  # here: reading and describing arrays never need its codec classes

        return numcodecs.Blosc(cname=self.cname, clevel=self.clevel, shuffle=self.shuffle_id, blocksize=self.blocksize)

    @staticmethod
    def from_numcodecs(compressor: numcodecs.Blosc) -> BloscCompression:
        """From a numcodecs Blosc codec (ValueError for other codecs or automatic shuffle)."""
        import numcodecs

        if not isinstance(compressor, numcodecs.Blosc):
            raise ValueError(f"not a blosc compressor: {compressor!r}")
        return BloscCompression.from_config(compressor.get_config())

    @staticmethod
    def from_config(config: Mapping[str, Any]) -> BloscCompression:
        """From numcodecs' configuration of a Blosc codec (zarr format 2's ``compressor``;
        ValueError for automatic shuffle)."""
        shuffle = config["shuffle"]
        if shuffle not in range(len(_SHUFFLES)):
            raise ValueError(f"blosc shuffle {shuffle} (automatic) has no fixed equivalent")
        return BloscCompression(config["cname"], config["clevel"], _SHUFFLES[shuffle], config["blocksize"])

    @staticmethod
    def from_config_v3(config: BloscConfigV3) -> BloscCompression:
        """From the configuration of a zarr format 3 blosc codec."""
        try:
            return BloscCompression(config["cname"], config["clevel"], config["shuffle"], config.get("blocksize", 0))
        except KeyError as error:
            raise ValueError(f"blosc configuration without {error}: {dict(config)!r}") from error
