-- Issue 25: the claim hands the executor each item's `expected` (for equals and judge checks) and
-- the feedback of a failed `retry` check, so a worker needs no extra read per item. Their return
-- types changed; server/batches/sql/claim.sql and worker-pass.sql re-create them.
DROP FUNCTION IF EXISTS flotilla_worker_pass(text, jsonb, uuid[], bigint[], integer, integer, integer, double precision, integer);
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_claim(text, integer, integer, double precision, integer, boolean);
