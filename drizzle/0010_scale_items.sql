-- Issue 22, point 4: a 100,000-item submission writes about what PostgreSQL itself needs.
-- Measured on PostgreSQL 15 (server side, 100,000 rows of one batch, load ~2): 1,200 ms with the
-- old constraints, of which the per-row foreign-key check on batch_id took ~350 ms and the unused
-- (batch_id, item_key) unique index ~170 ms. Items are written only by server/batches/insert-items.ts
-- in the transaction that creates their batch, and leave with it through the trigger below.
-- Failed and cancelled rows get partial indexes for status-filtered pages (terminal and rare, so
-- they cost the worker's transitions nothing).
ALTER TABLE "subagent_batch_items" DROP CONSTRAINT "subagent_batch_items_batch_id_subagent_batches_id_fk";
--> statement-breakpoint
DROP INDEX "subagent_batch_items_key_uq";--> statement-breakpoint
CREATE INDEX "subagent_batch_items_failed_idx" ON "subagent_batch_items" USING btree ("batch_id","position") WHERE status = 'failed';--> statement-breakpoint
CREATE INDEX "subagent_batch_items_cancelled_idx" ON "subagent_batch_items" USING btree ("batch_id","position") WHERE status = 'cancelled';
--> statement-breakpoint
CREATE OR REPLACE FUNCTION flotilla_delete_batch_items() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM subagent_batch_items i USING gone WHERE i.batch_id = gone.id;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER subagent_batches_delete_items
  AFTER DELETE ON subagent_batches
  REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION flotilla_delete_batch_items();
