-- Worker-side transitions, second version.
--
-- 1. They commit with synchronous_commit = off (transaction-local). Every one of them is a
--    fenced, lease-protected transition: if the database server itself crashes, the last few
--    hundred milliseconds of such transitions may roll back together (WAL order keeps them
--    consistent, counters included), which the lease protocol already handles: a lost claim
--    fences its worker out at the next write, a lost settlement leaves the item running under a
--    lease that expires and is re-run (execution is at least once). Submissions and user
--    controls (cancel, pause, resume, retry) stay fully synchronous. This takes the WAL flush off
--    the path that holds a batch row lock, which otherwise caps one batch at one flush per
--    transition.
-- 2. flotilla_settle_and_claim: a worker's completions and its next claim in one transaction.
--    While it holds the locks of the batches it settled it never waits for another batch
--    (claim with p_wait = false).
DROP FUNCTION flotilla_claim_items(text, integer, double precision, integer);
--> statement-breakpoint
CREATE OR REPLACE FUNCTION flotilla_claim_items(
  p_owner text, p_limit integer, p_lease_seconds double precision, p_max_batches integer DEFAULT 8,
  p_wait boolean DEFAULT true
)
RETURNS TABLE (item_id uuid, batch_id uuid, item_key text, item_position integer, prompt text, lease_token bigint, attempt integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_candidates uuid[];
  v_ids uuid[] := '{}';
  v_caps integer[] := '{}';
  v_free_live integer[] := '{}';
  v_pending integer[] := '{}';
  v_alloc integer[];
  v_id uuid;
  v_left integer := p_limit;
  v_open integer;
  v_share integer;
  v_give integer;
  v_n integer;
  b record;
BEGIN
  -- Worker transitions commit asynchronously (see the header of this migration).
  PERFORM set_config('synchronous_commit', 'off', true);
  IF p_limit IS NULL OR p_limit <= 0 THEN RETURN; END IF;

  SELECT array_agg(c.id ORDER BY c.last_claimed_at NULLS FIRST, c.id) INTO v_candidates
  FROM (
    SELECT s.id, s.last_claimed_at FROM subagent_batches s
    WHERE s.status IN ('queued', 'running')
      AND (s.queued_count > 0 OR s.pending_count > 0)
      AND s.leased_count + s.running_count < s.max_running_items
    ORDER BY s.last_claimed_at NULLS FIRST, s.id
    LIMIT p_max_batches
  ) c;
  IF v_candidates IS NULL THEN RETURN; END IF;

  FOREACH v_id IN ARRAY v_candidates LOOP
    SELECT * INTO b FROM subagent_batches s
      WHERE s.id = v_id AND s.status IN ('queued', 'running') FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
      v_ids := v_ids || b.id;
      v_free_live := v_free_live || greatest(b.max_live_items - b.queued_count - b.leased_count - b.running_count, 0);
      v_pending := v_pending || b.pending_count;
      v_caps := v_caps || greatest(least(
        b.max_running_items - b.leased_count - b.running_count,
        b.queued_count + least(b.pending_count, greatest(b.max_live_items - b.queued_count - b.leased_count - b.running_count, 0))
      ), 0);
    END IF;
  END LOOP;

  IF cardinality(v_ids) = 0 THEN
    -- Every candidate is held by another transaction: wait for the fairest one, but only when
    -- the caller holds no batch lock itself (p_wait), so waiting can never close a cycle.
    IF NOT p_wait THEN RETURN; END IF;
    SELECT * INTO b FROM subagent_batches s
      WHERE s.id = v_candidates[1] AND s.status IN ('queued', 'running') FOR UPDATE;
    IF NOT FOUND THEN RETURN; END IF;
    v_ids := ARRAY[b.id];
    v_free_live := ARRAY[greatest(b.max_live_items - b.queued_count - b.leased_count - b.running_count, 0)];
    v_pending := ARRAY[b.pending_count];
    v_caps := ARRAY[greatest(least(
      b.max_running_items - b.leased_count - b.running_count,
      b.queued_count + least(b.pending_count, greatest(b.max_live_items - b.queued_count - b.leased_count - b.running_count, 0))
    ), 0)];
  END IF;

  -- Water-filling: equal shares across the locked batches, leftovers to those with more room.
  v_n := cardinality(v_ids);
  v_alloc := array_fill(0, ARRAY[v_n]);
  LOOP
    SELECT count(*) INTO v_open FROM generate_subscripts(v_ids, 1) g WHERE v_caps[g] > v_alloc[g];
    EXIT WHEN v_left <= 0 OR v_open = 0;
    v_share := greatest(1, ceil(v_left::numeric / v_open)::integer);
    FOR i IN 1..v_n LOOP
      v_give := least(v_share, v_caps[i] - v_alloc[i], v_left);
      IF v_give > 0 THEN
        v_alloc[i] := v_alloc[i] + v_give;
        v_left := v_left - v_give;
      END IF;
    END LOOP;
  END LOOP;

  FOR i IN 1..v_n LOOP
    IF v_alloc[i] > 0 THEN
      -- Fill the live window from the durable backlog, in position order.
      IF v_free_live[i] > 0 AND v_pending[i] > 0 THEN
        UPDATE subagent_batch_items it SET status = 'queued', updated_at = now()
        WHERE it.id IN (
          SELECT p.id FROM subagent_batch_items p
          WHERE p.batch_id = v_ids[i] AND p.status = 'pending'
          ORDER BY p.position LIMIT v_free_live[i]
          FOR UPDATE SKIP LOCKED
        );
      END IF;

      RETURN QUERY
      WITH c AS (
        SELECT q.id FROM subagent_batch_items q
        WHERE q.batch_id = v_ids[i] AND q.status = 'queued'
          AND (q.available_at IS NULL OR q.available_at <= now())
        ORDER BY q.position LIMIT v_alloc[i]
        FOR UPDATE SKIP LOCKED
      )
      UPDATE subagent_batch_items it SET
        status = 'leased',
        lease_owner = p_owner,
        lease_token = it.lease_token + 1,
        leased_at = now(),
        lease_expires_at = now() + make_interval(secs => p_lease_seconds),
        attempts = it.attempts + 1,
        available_at = NULL,
        updated_at = now()
      FROM c WHERE it.id = c.id
      RETURNING it.id, it.batch_id, it.item_key, it.position, it.prompt, it.lease_token, it.attempts;
    END IF;
  END LOOP;

  -- Rotate fairness for the batches that were served (or had nothing claimable), not for those
  -- that only lost out because p_limit ran out; start the batches that got work.
  UPDATE subagent_batches s SET
    last_claimed_at = clock_timestamp(),
    status = CASE WHEN s.status = 'queued' AND s.leased_count > 0 THEN 'running' ELSE s.status END,
    started_at = CASE WHEN s.leased_count > 0 THEN coalesce(s.started_at, now()) ELSE s.started_at END
  FROM generate_subscripts(v_ids, 1) g
  WHERE s.id = v_ids[g] AND (v_alloc[g] > 0 OR v_caps[g] = 0);
END
$$;
--> statement-breakpoint

CREATE OR REPLACE FUNCTION flotilla_mark_running(
  p_owner text, p_ids uuid[], p_tokens bigint[], p_lease_seconds double precision
)
RETURNS TABLE (item_id uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
  -- Worker transitions commit asynchronously (see the header of this migration).
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM 1 FROM subagent_batches s
  WHERE s.id IN (SELECT i.batch_id FROM subagent_batch_items i WHERE i.id = ANY(p_ids))
  ORDER BY s.id FOR UPDATE;

  RETURN QUERY
  UPDATE subagent_batch_items it SET
    status = 'running',
    started_at = now(),
    lease_expires_at = now() + make_interval(secs => p_lease_seconds),
    updated_at = now()
  FROM unnest(p_ids, p_tokens) AS r(id, token)
  WHERE it.id = r.id AND it.lease_token = r.token AND it.lease_owner = p_owner
    AND it.status = 'leased' AND it.lease_expires_at > now()
  RETURNING it.id;
END
$$;
--> statement-breakpoint

CREATE OR REPLACE FUNCTION flotilla_settle_items(p_owner text, p_rows jsonb, p_max_deferrals integer)
RETURNS TABLE (item_id uuid, new_status text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
  -- Worker transitions commit asynchronously (see the header of this migration).
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM 1 FROM subagent_batches s
  WHERE s.id IN (
    SELECT i.batch_id FROM subagent_batch_items i
    WHERE i.id IN (SELECT (e->>'id')::uuid FROM jsonb_array_elements(p_rows) e)
  )
  ORDER BY s.id FOR UPDATE;

  RETURN QUERY
  WITH r AS (
    SELECT * FROM jsonb_to_recordset(p_rows) AS x(
      id uuid, token bigint, kind text, result text, preview text, error text, model text,
      stop_reason text, input_tokens bigint, output_tokens bigint, retryable boolean, delay_ms bigint, run_id uuid
    )
  ),
  cur AS (
    SELECT it.id, it.batch_id, it.attempts, it.deferrals, it.leased_at, it.started_at, it.status AS old_status,
      bt.max_attempts, r.kind, r.result, r.preview, r.error, r.model, r.stop_reason,
      coalesce(r.input_tokens, 0) AS input_tokens, coalesce(r.output_tokens, 0) AS output_tokens,
      coalesce(r.retryable, true) AS retryable, coalesce(r.delay_ms, 0) AS delay_ms, r.run_id
    FROM subagent_batch_items it
    JOIN r ON r.id = it.id
    JOIN subagent_batches bt ON bt.id = it.batch_id
    WHERE it.lease_owner = p_owner AND it.lease_token = r.token AND it.status IN ('leased', 'running')
    FOR UPDATE OF it
  ),
  plan AS (
    SELECT cur.*,
      (cur.kind = 'released' OR (cur.kind = 'deferred' AND cur.deferrals < p_max_deferrals)) AS refund,
      CASE
        WHEN cur.kind = 'succeeded' THEN 'succeeded'
        WHEN cur.kind = 'released' THEN 'queued'
        WHEN cur.kind = 'deferred' AND cur.deferrals < p_max_deferrals THEN 'queued'
        WHEN cur.retryable AND cur.attempts < cur.max_attempts THEN 'queued'
        ELSE 'failed'
      END AS next_status,
      CASE
        WHEN cur.kind = 'deferred' AND cur.deferrals >= p_max_deferrals THEN
          coalesce(cur.error, 'rate limited') || ' (deferred ' || cur.deferrals || ' times already, the limit of rate_limits.max_deferrals)'
        ELSE cur.error
      END AS final_error
    FROM cur
  ),
  upd AS (
    UPDATE subagent_batch_items it SET
      status = plan.next_status,
      attempts = CASE WHEN plan.refund THEN greatest(it.attempts - 1, 0) ELSE it.attempts END,
      deferrals = CASE WHEN plan.kind = 'deferred' THEN it.deferrals + 1 ELSE it.deferrals END,
      available_at = CASE
        WHEN plan.next_status = 'queued' AND plan.delay_ms > 0 THEN now() + make_interval(secs => plan.delay_ms / 1000.0)
        ELSE NULL END,
      lease_owner = NULL,
      lease_expires_at = NULL,
      result = CASE WHEN plan.next_status = 'succeeded' THEN plan.result ELSE it.result END,
      preview = CASE WHEN plan.next_status = 'succeeded' THEN plan.preview ELSE it.preview END,
      error = CASE
        WHEN plan.next_status = 'succeeded' THEN NULL
        WHEN plan.kind = 'released' THEN it.error
        ELSE plan.final_error END,
      model = coalesce(plan.model, it.model),
      stop_reason = coalesce(plan.stop_reason, it.stop_reason),
      input_tokens = it.input_tokens + plan.input_tokens,
      output_tokens = it.output_tokens + plan.output_tokens,
      run_id = coalesce(plan.run_id, it.run_id),
      finished_at = CASE WHEN plan.next_status IN ('succeeded', 'failed') THEN now() ELSE NULL END,
      updated_at = now()
    FROM plan WHERE it.id = plan.id
    RETURNING it.id, it.status
  ),
  hist AS (
    INSERT INTO subagent_batch_item_attempts (item_id, batch_id, attempt, worker_id, outcome, error, run_id, leased_at, started_at, finished_at)
    SELECT plan.id, plan.batch_id, plan.attempts, p_owner,
      CASE
        WHEN plan.next_status = 'succeeded' THEN 'succeeded'
        WHEN plan.kind = 'released' THEN 'released'
        WHEN plan.refund THEN 'deferred'
        WHEN plan.next_status = 'queued' THEN 'retry'
        ELSE 'failed' END,
      CASE WHEN plan.next_status = 'succeeded' THEN NULL ELSE plan.final_error END,
      plan.run_id, coalesce(plan.leased_at, now()),
      CASE WHEN plan.old_status = 'running' THEN plan.started_at ELSE NULL END,
      now()
    FROM plan
  )
  SELECT upd.id, upd.status FROM upd;
END
$$;
--> statement-breakpoint

CREATE OR REPLACE FUNCTION flotilla_recover_expired_leases(p_limit integer DEFAULT 500)
RETURNS TABLE (item_id uuid, new_status text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_batches uuid[];
BEGIN
  -- Worker transitions commit asynchronously (see the header of this migration).
  PERFORM set_config('synchronous_commit', 'off', true);
  SELECT array_agg(DISTINCT e.batch_id) INTO v_batches FROM (
    SELECT i.batch_id FROM subagent_batch_items i
    WHERE i.status IN ('leased', 'running') AND i.lease_expires_at < now()
    LIMIT p_limit
  ) e;
  IF v_batches IS NULL THEN RETURN; END IF;

  PERFORM 1 FROM subagent_batches s WHERE s.id = ANY(v_batches) ORDER BY s.id FOR UPDATE;

  RETURN QUERY
  WITH cur AS (
    SELECT it.id, it.batch_id, it.attempts, it.lease_owner, it.leased_at, it.started_at, it.status AS old_status,
      bt.max_attempts,
      'lease expired on attempt ' || it.attempts || ' of ' || bt.max_attempts || ' (worker ' ||
        coalesce(it.lease_owner, 'unknown') || ' stopped renewing it while ' || it.status || ')' ||
        CASE WHEN it.attempts >= bt.max_attempts THEN '; no attempts left' ELSE '; retrying' END AS message
    FROM subagent_batch_items it
    JOIN subagent_batches bt ON bt.id = it.batch_id
    WHERE it.batch_id = ANY(v_batches) AND it.status IN ('leased', 'running') AND it.lease_expires_at < now()
    LIMIT p_limit
    FOR UPDATE OF it SKIP LOCKED
  ),
  upd AS (
    UPDATE subagent_batch_items it SET
      status = CASE WHEN cur.attempts >= cur.max_attempts THEN 'failed' ELSE 'queued' END,
      error = cur.message,
      lease_owner = NULL,
      lease_expires_at = NULL,
      finished_at = CASE WHEN cur.attempts >= cur.max_attempts THEN now() ELSE NULL END,
      updated_at = now()
    FROM cur WHERE it.id = cur.id
    RETURNING it.id, it.status
  ),
  hist AS (
    INSERT INTO subagent_batch_item_attempts (item_id, batch_id, attempt, worker_id, outcome, error, leased_at, started_at, finished_at)
    SELECT cur.id, cur.batch_id, cur.attempts, coalesce(cur.lease_owner, 'unknown'), 'lease_expired', cur.message,
      coalesce(cur.leased_at, now()), CASE WHEN cur.old_status = 'running' THEN cur.started_at ELSE NULL END, now()
    FROM cur
  )
  SELECT upd.id, upd.status FROM upd;
END
$$;
--> statement-breakpoint

CREATE OR REPLACE FUNCTION flotilla_settle_and_claim(
  p_owner text, p_rows jsonb, p_max_deferrals integer, p_limit integer, p_lease_seconds double precision,
  p_max_batches integer DEFAULT 8
)
RETURNS TABLE (item_id uuid, batch_id uuid, item_key text, item_position integer, prompt text, lease_token bigint,
  attempt integer, settled_status text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_settling boolean := p_rows IS NOT NULL AND jsonb_array_length(p_rows) > 0;
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  IF v_settling THEN
    RETURN QUERY
    SELECT s.item_id, NULL::uuid, NULL::text, NULL::integer, NULL::text, NULL::bigint, NULL::integer, s.new_status
      FROM flotilla_settle_items(p_owner, p_rows, p_max_deferrals) s;
  END IF;
  IF p_limit > 0 THEN
    RETURN QUERY
    SELECT c.item_id, c.batch_id, c.item_key, c.item_position, c.prompt, c.lease_token, c.attempt, NULL::text
      FROM flotilla_claim_items(p_owner, p_limit, p_lease_seconds, p_max_batches, NOT v_settling) c;
  END IF;
END
$$;
