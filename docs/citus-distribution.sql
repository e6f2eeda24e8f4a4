-- memory_sql on Citus: the distribution of its schema (a design, checked by
-- tests/test_citus_design.py against the schema Alembic makes; see docs/deployment.md).
--
-- Run on the coordinator, once, after `memory-sql db upgrade` made the schema there and
-- before any data is written (an empty table distributes at once). Later migrations run on the
-- coordinator too: Citus propagates their DDL to the shards.
--
-- Every table but two carries tenant_id, and every primary key, unique index and foreign key
-- of those starts with it: they are distributed by tenant_id and colocated with memory_scopes,
-- so one tenant's memory (its scopes, sections, facts, vectors, history, watermarks, LLM
-- accounting) lives in one shard group on one worker, and every request of the service, which
-- acts for one tenant, is routed to that worker alone.

-- The anchor of the colocation group: one memory per (tenant_id, user_id, agent_name).
SELECT create_distributed_table('memory_scopes', 'tenant_id');

-- A memory's rows: their foreign keys to memory_scopes (and memory_fact_vectors' to
-- memory_facts) include tenant_id, as Citus requires between colocated tables.
SELECT create_distributed_table('memory_sections', 'tenant_id', colocate_with => 'memory_scopes');
SELECT create_distributed_table('memory_facts', 'tenant_id', colocate_with => 'memory_scopes');
SELECT create_distributed_table('memory_fact_vectors', 'tenant_id', colocate_with => 'memory_scopes');
SELECT create_distributed_table('memory_fact_events', 'tenant_id', colocate_with => 'memory_scopes');
SELECT create_distributed_table('memory_watermarks', 'tenant_id', colocate_with => 'memory_scopes');

-- Per-tenant accounting: written in the update's transaction, with the memory it updates.
SELECT create_distributed_table('memory_llm_calls', 'tenant_id', colocate_with => 'memory_scopes');
SELECT create_distributed_table('memory_llm_rejections', 'tenant_id', colocate_with => 'memory_scopes');
SELECT create_distributed_table('memory_llm_budget_holds', 'tenant_id', colocate_with => 'memory_scopes');
SELECT create_distributed_table('memory_redactions', 'tenant_id', colocate_with => 'memory_scopes');

-- API keys are looked up by key_id alone (the secret names no tenant): a reference table,
-- copied to every node, so the lookup never fans out. Keys are few and rarely written.
SELECT create_reference_table('memory_api_keys');

-- The queue stays on the coordinator, a Citus local table: its claim (FOR UPDATE SKIP LOCKED
-- across tenants, ordered by due time), its per-memory advisory locks and its NOTIFY trigger
-- (memory_sql_queue_notify, which the workers' LISTEN hears) all need one node. An update's
-- save (on a worker) and the completion of its queue row (on the coordinator) still commit
-- together: Citus commits a transaction that wrote to several nodes with two-phase commit.
SELECT citus_add_local_table_to_metadata('memory_pending_updates');

-- Left as they are on the coordinator: alembic_version (the schema's revision, read and
-- written by migrations only) and the memory_report_* views (they read the distributed
-- tables through the coordinator, and fan out).
-- local: alembic_version
