-- Issue 22: each worker transition is now written once, one function per file under
-- server/batches/sql/, applied after these migrations by the migrator (server/db/migrate.ts) as
-- `create or replace`. This migration only removes what those files supersede: the functions of
-- 0001 and 0006 whose signatures changed, and the counters trigger that hot functions switched
-- off with a session setting (the new trigger is always on; its file re-creates it).
DROP TRIGGER IF EXISTS subagent_batch_items_counters ON subagent_batch_items;
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_batch_items_counters();
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_settle_and_claim(text, jsonb, integer, integer, double precision, integer);
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_claim_items(text, integer, double precision, integer, boolean);
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_mark_running(text, uuid[], bigint[], double precision);
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_settle_items(text, jsonb, integer);
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_recover_expired_leases(integer);
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_water_fill(integer[], integer);
