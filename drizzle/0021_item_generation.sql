ALTER TABLE "subagent_batch_items" ADD COLUMN "generation" integer DEFAULT 1 NOT NULL;--> statement-breakpoint
-- The claim now hands over each item's `generation` (the idempotency key names it); its return
-- type and the worker pass's changed, so server/batches/sql/claim.sql and worker-pass.sql re-create them.
DROP FUNCTION IF EXISTS flotilla_worker_pass(text, jsonb, uuid[], bigint[], integer, integer, integer, double precision, integer);
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_claim(text, integer, integer, double precision, integer, boolean);
