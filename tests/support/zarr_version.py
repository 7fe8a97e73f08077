"""Which zarr-python the suite runs under (it runs under zarr-python 3 and again under 2.18,
see scripts/test), and the skip marks for what only zarr-python 3 has."""

from __future__ import annotations

import pytest
import zarr

ZARR_MAJOR = int(zarr.__version__.split(".")[0])

#: zarr-python 3 reads and writes zarr format 3; zarr-python 2 refuses it with a ValueError
#: (tested on its own in tests/test_zarr2.py).
FORMAT_3_SKIP_REASON = f"zarr format 3 needs zarr-python 3 (zarr {zarr.__version__} is installed)"

#: For tests of zarr-python 3's own API (its store protocol, codecs, async API).
zarr3_only = pytest.mark.skipif(
    ZARR_MAJOR < 3, reason=f"uses zarr-python 3's own API (zarr {zarr.__version__} is installed)"
)


def skip_format_3(items: list[pytest.Item]) -> None:
    """Under zarr-python 2: skips the cases of tests parametrised with ``zarr_format=3``."""
    if ZARR_MAJOR >= 3:
        return
    mark = pytest.mark.skip(reason=FORMAT_3_SKIP_REASON)
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("zarr_format") == 3:
            item.add_marker(mark)
