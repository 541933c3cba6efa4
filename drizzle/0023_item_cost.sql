ALTER TABLE "subagent_batch_items" ADD COLUMN "cost_usd" double precision DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "cost_usd" double precision DEFAULT 0 NOT NULL;--> statement-breakpoint
-- Issue 30: a judge is priced at its own model's price. An item's cost_usd sums each attempt's
-- cost (the executor's, pricing each model's tokens at that model's snapshot, else the attempt's
-- tokens at the batch's price: settle.sql); the counters trigger moves the batch's with it
-- (counters.sql). Until now cost was the tokens at the batch's price: that is what existing rows
-- spent by the old rule.
UPDATE "subagent_batch_items" it
   SET "cost_usd" = (it.input_tokens * b.price_input_per_million + it.output_tokens * b.price_output_per_million) / 1e6
  FROM "subagent_batches" b
 WHERE b.id = it.batch_id AND (it.input_tokens > 0 OR it.output_tokens > 0)
   AND (b.price_input_per_million > 0 OR b.price_output_per_million > 0);--> statement-breakpoint
UPDATE "subagent_batches"
   SET "cost_usd" = (input_tokens * price_input_per_million + output_tokens * price_output_per_million) / 1e6
 WHERE (input_tokens > 0 OR output_tokens > 0) AND (price_input_per_million > 0 OR price_output_per_million > 0);--> statement-breakpoint

-- BEFORE UPDATE (0008): the dollar budget compares the batch's cost_usd.
CREATE OR REPLACE FUNCTION flotilla_batch_loop_before() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  v_delta bigint := (NEW.input_tokens + NEW.output_tokens) - (OLD.input_tokens + OLD.output_tokens);
  v_today bigint;
BEGIN
  IF v_delta > 0 THEN
    INSERT INTO user_daily_tokens AS u (user_id, day, tokens)
      VALUES (NEW.user_id, (now() AT TIME ZONE 'utc')::date, v_delta)
      ON CONFLICT (user_id, day) DO UPDATE SET tokens = u.tokens + excluded.tokens
      RETURNING u.tokens INTO v_today;
  END IF;

  IF NEW.status IN ('queued', 'running') THEN
    -- Claims only take queued/running batches, so pausing here stops the claim that would come
    -- next in this very transaction (settle_and_claim); items already in flight still finish.
    IF (NEW.max_total_tokens IS NOT NULL AND NEW.input_tokens + NEW.output_tokens >= NEW.max_total_tokens)
       OR (NEW.max_cost_usd IS NOT NULL AND NEW.cost_usd >= NEW.max_cost_usd) THEN
      NEW.status := 'paused';
      NEW.pause_reason := 'budget';
    ELSIF NEW.daily_token_quota > 0 AND v_today IS NOT NULL AND v_today >= NEW.daily_token_quota THEN
      NEW.status := 'paused';
      NEW.pause_reason := 'quota';
    ELSE
      NEW.pause_reason := NULL;
    END IF;
  ELSIF NEW.status = 'paused' THEN
    NEW.pause_reason := coalesce(NEW.pause_reason, 'user');
  ELSE
    NEW.pause_reason := NULL;
  END IF;

  IF OLD.status IN ('queued', 'running', 'paused') AND NEW.status IN ('completed', 'failed', 'cancelled') THEN
    NEW.settlement_seq := OLD.settlement_seq + 1;
    NEW.unseen_settlement := true;
  END IF;
  RETURN NEW;
END
$$;--> statement-breakpoint

-- The webhook event body (0013): cost_usd is the batch's.
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
      'cost_usd', b.cost_usd))
$$;
