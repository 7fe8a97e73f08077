"""Training datasets over many archives (above the typed layer; the only code that imports
torch, and only where torch is installed).

:class:`SampleIndex` says what a sample is and where each lies; :class:`TrainingDataset`
iterates the samples shuffled, split between ranks and DataLoader workers, resumable;
:class:`TrainingLoader` is torch's DataLoader counting what was consumed; :class:`SampleView`
reads samples by number. See the Training page of the documentation.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._dataset import SampleView as SampleView, TrainingDataset as TrainingDataset
    from ._fields import Blob as Blob, Rows as Rows, SampleNumber as SampleNumber
    from ._index import SampleIndex as SampleIndex
    from ._loader import TrainingLoader as TrainingLoader
    from ._order import sequences_per_batch as sequences_per_batch

_LAZY = {
    **dict.fromkeys(["Blob", "Rows", "SampleNumber"], "._fields"),
    "SampleIndex": "._index",
    **dict.fromkeys(["SampleView", "TrainingDataset"], "._dataset"),
    "TrainingLoader": "._loader",
    "sequences_per_batch": "._order",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
