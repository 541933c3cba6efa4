-- Closing the loop on durable batches (issue 15). Self-contained: functions and triggers only;
-- the claim, settle and recovery functions of 0001 are untouched. Every path that moves a
-- batch row (settle, lease recovery, the item-counter trigger, cancel, retry) runs through
-- these row triggers inside its own transaction, so budgets, settlements and the rows that
-- wake the lead or call a webhook are decided in the same commit as the item that caused them.

-- BEFORE UPDATE: daily token accounting, budget / quota pause, pause_reason, settlement number.
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
       OR (NEW.max_cost_usd IS NOT NULL AND
           (NEW.input_tokens * NEW.price_input_per_million + NEW.output_tokens * NEW.price_output_per_million) / 1e6
             >= NEW.max_cost_usd) THEN
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
$$;
--> statement-breakpoint
DROP TRIGGER IF EXISTS subagent_batches_loop_before ON subagent_batches;
--> statement-breakpoint
CREATE TRIGGER subagent_batches_loop_before
  BEFORE UPDATE ON subagent_batches
  FOR EACH ROW EXECUTE FUNCTION flotilla_batch_loop_before();
--> statement-breakpoint

-- AFTER UPDATE of a settlement: the pending wake-up (lead-submitted batches) and the webhook
-- delivery (users with a webhook) are inserted by the settling transaction itself, unique per
-- (batch, settlement_seq): nothing is lost when no web process is up, nothing is doubled.
CREATE OR REPLACE FUNCTION flotilla_batch_loop_settled() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.wake_lead THEN
    INSERT INTO batch_wakeups (batch_id, thread_id, user_id, settlement_seq, settled_status)
      VALUES (NEW.id, NEW.thread_id, NEW.user_id, NEW.settlement_seq, NEW.status)
      ON CONFLICT (batch_id, settlement_seq) DO NOTHING;
  END IF;
  INSERT INTO webhook_deliveries (user_id, batch_id, settlement_seq, url, body)
    SELECT w.user_id, NEW.id, NEW.settlement_seq, w.url, jsonb_build_object(
      'event', 'batch.settled',
      'batch_id', NEW.id,
      'thread_id', NEW.thread_id,
      'status', NEW.status,
      'settlement_seq', NEW.settlement_seq,
      'total', NEW.total,
      -- A cancel marks the batch first and its unfinished items right after, in the same
      -- transaction: every item not succeeded or failed ends cancelled.
      'counts', jsonb_build_object('succeeded', NEW.succeeded_count, 'failed', NEW.failed_count,
                                   'cancelled', CASE WHEN NEW.status = 'cancelled'
                                     THEN NEW.total - NEW.succeeded_count - NEW.failed_count
                                     ELSE NEW.cancelled_count END),
      'usage', jsonb_build_object('input_tokens', NEW.input_tokens, 'output_tokens', NEW.output_tokens),
      'cost_usd', (NEW.input_tokens * NEW.price_input_per_million + NEW.output_tokens * NEW.price_output_per_million) / 1e6,
      'finished_at', NEW.finished_at)
    FROM user_webhooks w WHERE w.user_id = NEW.user_id
    ON CONFLICT (batch_id, settlement_seq, user_id) DO NOTHING;
  PERFORM pg_notify('flotilla_loop', NEW.id::text);
  RETURN NULL;
END
$$;
--> statement-breakpoint
DROP TRIGGER IF EXISTS subagent_batches_loop_settled ON subagent_batches;
--> statement-breakpoint
CREATE TRIGGER subagent_batches_loop_settled
  AFTER UPDATE ON subagent_batches
  FOR EACH ROW WHEN (NEW.settlement_seq IS DISTINCT FROM OLD.settlement_seq)
  EXECUTE FUNCTION flotilla_batch_loop_settled();
--> statement-breakpoint

-- Lead, task and swarm runs count toward the user's daily tokens (batch items count through
-- their batch row above, so batch_item runs are left out here).
CREATE OR REPLACE FUNCTION flotilla_runs_daily_tokens() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  v_delta bigint := (NEW.input_tokens + NEW.output_tokens)
    - CASE WHEN TG_OP = 'UPDATE' THEN OLD.input_tokens + OLD.output_tokens ELSE 0 END;
BEGIN
  IF v_delta > 0 THEN
    INSERT INTO user_daily_tokens AS u (user_id, day, tokens)
      VALUES (NEW.user_id, (now() AT TIME ZONE 'utc')::date, v_delta)
      ON CONFLICT (user_id, day) DO UPDATE SET tokens = u.tokens + excluded.tokens;
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
DROP TRIGGER IF EXISTS agent_runs_daily_tokens ON agent_runs;
--> statement-breakpoint
CREATE TRIGGER agent_runs_daily_tokens
  AFTER INSERT OR UPDATE ON agent_runs
  FOR EACH ROW WHEN (NEW.kind <> 'batch_item')
  EXECUTE FUNCTION flotilla_runs_daily_tokens();
