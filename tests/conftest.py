"""Shared fixtures: local S3 (moto behind a logging proxy) and HTTP servers on 127.0.0.1
come from tests.support.fixtures."""

from __future__ import annotations

pytest_plugins = ["tests.support.fixtures"]
