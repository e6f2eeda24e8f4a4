"""Stand-in: ``deerflow.agents``."""

from __future__ import annotations
