"""memory_sql as a multi-tenant HTTP service: ``memory-sql serve`` (needs ``memory-sql[server]``).

- :mod:`.app` builds the FastAPI application: one :class:`~memory_sql.MemoryService` per process,
  every route under ``/v1`` acting for the tenant of the request's API key;
- :mod:`.keys` keeps the API keys (importable without the ``server`` extra, for the CLI);
- :mod:`.grants` the privileges of the role the service connects as (``memory-sql db grant``);
- :mod:`.state` what a process's requests share; :mod:`.auth`, :mod:`.errors`,
  :mod:`.metrics`, :mod:`.requests` the cross-cutting parts; :mod:`.routes` one module per
  group of routes.

Isolation is enforced twice: every query names the key's tenant, and on PostgreSQL row-level
security (:mod:`memory_sql.tenancy`) hides every other tenant's rows from the service's
connections even where a query forgets to.
"""
