"""Shared fixtures: local S3 (moto behind a logging proxy) and HTTP servers on 127.0.0.1
come from tests.support.fixtures, a headless Chromium from tests.support.browser."""

from __future__ import annotations

import pytest

from tests.support.zarr_version import skip_format_3

pytest_plugins = ["tests.support.fixtures", "tests.support.browser"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_format_3(items)
