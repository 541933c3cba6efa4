-- Issue 24: webhooks follow Standard Webhooks. Deliveries get an event type and a stable event id
-- (the `webhook-id` of every attempt), pauses become events too, and the body takes the form
-- { type, timestamp, data: { id, thread_id, status, counts, usage, cost_usd } }. Secrets issued
-- before this keep working, marked `legacy` (the settings page asks for a new one).
DROP INDEX "webhook_deliveries_settlement_uq";--> statement-breakpoint
ALTER TABLE "user_webhooks" ADD COLUMN "signing" text DEFAULT 'standard' NOT NULL;--> statement-breakpoint
UPDATE "user_webhooks" SET "signing" = 'legacy';--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "type" text;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "event_id" uuid DEFAULT gen_random_uuid() NOT NULL;--> statement-breakpoint
UPDATE "webhook_deliveries" SET
  "type" = 'batch.' || (body->>'status'),
  "body" = jsonb_build_object(
    'type', 'batch.' || (body->>'status'),
    'timestamp', coalesce(body->>'finished_at', to_char(created_at AT TIME ZONE 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
    'data', jsonb_build_object(
      'id', body->'batch_id',
      'thread_id', body->'thread_id',
      'status', body->'status',
      'counts', coalesce(body->'counts', '{}'::jsonb) || jsonb_build_object('total', body->'total'),
      'usage', body->'usage',
      'cost_usd', body->'cost_usd'));--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ALTER COLUMN "type" SET NOT NULL;--> statement-breakpoint
CREATE INDEX "batch_wakeups_user_pending_idx" ON "batch_wakeups" USING btree ("user_id","next_attempt_at") WHERE done_at is null;--> statement-breakpoint
CREATE INDEX "webhook_deliveries_user_pending_idx" ON "webhook_deliveries" USING btree ("user_id","next_attempt_at") WHERE status = 'pending';--> statement-breakpoint
CREATE UNIQUE INDEX "webhook_deliveries_settlement_uq" ON "webhook_deliveries" USING btree ("batch_id","settlement_seq","user_id") WHERE type <> 'batch.paused';--> statement-breakpoint

-- The event body of a batch row, as the settling (or pausing) transaction sees it.
CREATE OR REPLACE FUNCTION flotilla_webhook_event(b subagent_batches, p_type text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'type', p_type,
    'timestamp', to_char(now() AT TIME ZONE 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'data', jsonb_build_object(
      'id', b.id,
      'thread_id', b.thread_id,
      'status', b.status,
      -- A cancel marks the batch first and its unfinished items right after, in the same
      -- transaction: every item not succeeded or failed ends cancelled.
      'counts', jsonb_build_object('total', b.total, 'succeeded', b.succeeded_count, 'failed', b.failed_count,
                                   'cancelled', CASE WHEN b.status = 'cancelled'
                                     THEN b.total - b.succeeded_count - b.failed_count
                                     ELSE b.cancelled_count END),
      'usage', jsonb_build_object('input_tokens', b.input_tokens, 'output_tokens', b.output_tokens),
      'cost_usd', (b.input_tokens * b.price_input_per_million + b.output_tokens * b.price_output_per_million) / 1e6))
$$;--> statement-breakpoint

-- AFTER UPDATE of a settlement: the pending wake-up (lead-submitted batches) and the webhook
-- delivery (users with a webhook), unique per (batch, settlement_seq).
CREATE OR REPLACE FUNCTION flotilla_batch_loop_settled() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.wake_lead THEN
    INSERT INTO batch_wakeups (batch_id, thread_id, user_id, settlement_seq, settled_status)
      VALUES (NEW.id, NEW.thread_id, NEW.user_id, NEW.settlement_seq, NEW.status)
      ON CONFLICT (batch_id, settlement_seq) DO NOTHING;
  END IF;
  INSERT INTO webhook_deliveries (user_id, batch_id, settlement_seq, type, url, body)
    SELECT w.user_id, NEW.id, NEW.settlement_seq, 'batch.' || NEW.status, w.url,
           flotilla_webhook_event(NEW, 'batch.' || NEW.status)
    FROM user_webhooks w WHERE w.user_id = NEW.user_id
    ON CONFLICT (batch_id, settlement_seq, user_id) WHERE type <> 'batch.paused' DO NOTHING;
  PERFORM pg_notify('flotilla_loop', NEW.id::text);
  RETURN NULL;
END
$$;--> statement-breakpoint

-- AFTER UPDATE into paused (by the user, a budget or the daily quota): one batch.paused event.
CREATE OR REPLACE FUNCTION flotilla_batch_loop_paused() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO webhook_deliveries (user_id, batch_id, settlement_seq, type, url, body)
    SELECT w.user_id, NEW.id, NEW.settlement_seq, 'batch.paused', w.url, flotilla_webhook_event(NEW, 'batch.paused')
    FROM user_webhooks w WHERE w.user_id = NEW.user_id;
  RETURN NULL;
END
$$;--> statement-breakpoint
DROP TRIGGER IF EXISTS subagent_batches_loop_paused ON subagent_batches;--> statement-breakpoint
CREATE TRIGGER subagent_batches_loop_paused
  AFTER UPDATE ON subagent_batches
  FOR EACH ROW WHEN (NEW.status = 'paused' AND OLD.status IS DISTINCT FROM 'paused')
  EXECUTE FUNCTION flotilla_batch_loop_paused();
