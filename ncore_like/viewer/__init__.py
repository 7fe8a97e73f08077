"""``ncore-like view``: a local web viewer of archives and zarr hierarchies (the layer
beside the command line: it reads through the public layers below).

The web server needs aiohttp (``pip install 'ncore-like[view]'``), imported when a viewer
starts; the page is static HTML, JavaScript and CSS shipped with the package (no build step,
nothing fetched from the internet), drawing on canvases.
"""

from ._viewer import LOOPBACK, Viewer, view

__all__ = ["LOOPBACK", "Viewer", "view"]
