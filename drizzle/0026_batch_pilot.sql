ALTER TABLE "subagent_batches" ADD COLUMN "pilot" integer;--> statement-breakpoint
-- Issue 37: `pilot: N`. BEFORE UPDATE (0008, 0023) also pauses an active batch once its pilot's N
-- items have finished (pause_reason 'pilot'): the claim takes no item past position N while
-- `pilot` is set (claim.sql), so these N are the only items that can have finished. A resume from
-- that pause clears `pilot` in its own update (repository.ts resumeBatch).
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
    ELSIF NEW.pilot IS NOT NULL AND NEW.succeeded_count + NEW.failed_count + NEW.cancelled_count >= NEW.pilot THEN
      NEW.status := 'paused';
      NEW.pause_reason := 'pilot';
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
$$;
