"""Tests of the DeerFlow backend (a package, so that its conftest is its own module)."""

from __future__ import annotations
