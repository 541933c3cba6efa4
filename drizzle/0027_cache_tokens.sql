ALTER TABLE "subagent_batch_items" ADD COLUMN "cached_input_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "cache_write_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "cached_input_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "cache_write_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "agent_runs" ADD COLUMN "cached_input_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "agent_runs" ADD COLUMN "cache_write_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint

-- The webhook event body (0023): its usage carries the cache reads and writes as well.
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
      'usage', jsonb_build_object('input_tokens', b.input_tokens, 'output_tokens', b.output_tokens,
                                  'cached_input_tokens', b.cached_input_tokens, 'cache_write_tokens', b.cache_write_tokens),
      'cost_usd', b.cost_usd))
$$;
