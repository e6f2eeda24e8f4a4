"""The MCP server of memory_sql (a skin): tools and resources over the official ``mcp`` SDK,
served at ``/mcp`` of ``memory-sql serve`` (:mod:`.http`) and over stdio by ``memory-sql mcp``
(:mod:`.stdio`). The tools are defined once (:mod:`.tools`) over a memory in this process
or behind a service (:mod:`.backends`)."""

from __future__ import annotations

HTTP_PATH = "/mcp"
"""Where ``memory-sql serve`` answers MCP (kept here, light, for the server's lazy mount and
the endpoint alike)."""
