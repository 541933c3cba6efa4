-- Durable batch engine: counters trigger and the worker-side state transitions.
--
-- Lock order (deadlock freedom): every statement that changes item statuses first holds the
-- row locks of the affected batches, taken in id order (or, in the claim, without waiting while
-- any other lock is held). The counters trigger then updates batch rows the statement already
-- holds. Lease renewal changes no status and skips locked item rows, so it never waits.

-- Per-status counters, token usage and the terminal rule live on the batch row and move in the
-- same statement (hence the same transaction) as the items: progress reads never scan items.
--
-- Worker transitions commit with synchronous_commit = off (transaction-local). Each is a fenced,
-- lease-protected transition: if the database server crashes, the last few hundred milliseconds
-- of them may roll back together (WAL order keeps them consistent, counters included), which the
-- lease protocol already handles (a lost claim fences its worker out at its next write; a lost
-- settlement leaves the item under a lease that expires and is re-run: execution is at least
-- once). Submissions and user controls stay fully synchronous.
--
-- The hot worker functions (claim, mark running, settle, recover) move the batch counters
-- themselves, one batch-row update per batch per call. The statement-level counters trigger
-- keeps them right for every other writer (cancel, retry, maintenance SQL) and steps aside while
-- a hot function runs (flotilla.counters = 'manual').

-- The terminal rule, in one place: every item finished → completed if any succeeded, else
-- failed; a cancelled (or already finished) batch keeps its status.
CREATE OR REPLACE FUNCTION flotilla_next_batch_status(
  p_status text, p_succeeded bigint, p_failed bigint, p_cancelled bigint, p_total integer
)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_status IN ('queued', 'running', 'paused') AND p_succeeded + p_failed + p_cancelled >= p_total
    THEN CASE WHEN p_succeeded > 0 THEN 'completed' ELSE 'failed' END
    ELSE p_status
  END
$$;
--> statement-breakpoint

CREATE OR REPLACE FUNCTION flotilla_batch_items_counters() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- A hot worker function is moving the counters itself.
  IF current_setting('flotilla.counters', true) = 'manual' THEN RETURN NULL; END IF;
  WITH d AS (
    SELECT n.batch_id,
      count(*) FILTER (WHERE n.status = 'pending') - count(*) FILTER (WHERE o.status = 'pending') AS pending,
      count(*) FILTER (WHERE n.status = 'queued') - count(*) FILTER (WHERE o.status = 'queued') AS queued,
      count(*) FILTER (WHERE n.status = 'leased') - count(*) FILTER (WHERE o.status = 'leased') AS leased,
      count(*) FILTER (WHERE n.status = 'running') - count(*) FILTER (WHERE o.status = 'running') AS running,
      count(*) FILTER (WHERE n.status = 'succeeded') - count(*) FILTER (WHERE o.status = 'succeeded') AS succeeded,
      count(*) FILTER (WHERE n.status = 'failed') - count(*) FILTER (WHERE o.status = 'failed') AS failed,
      count(*) FILTER (WHERE n.status = 'cancelled') - count(*) FILTER (WHERE o.status = 'cancelled') AS cancelled,
      coalesce(sum(n.input_tokens - o.input_tokens), 0) AS input_tokens,
      coalesce(sum(n.output_tokens - o.output_tokens), 0) AS output_tokens
    FROM old_items o JOIN new_items n ON n.id = o.id
    WHERE n.status IS DISTINCT FROM o.status
       OR n.input_tokens <> o.input_tokens
       OR n.output_tokens <> o.output_tokens
    GROUP BY n.batch_id
  )
  UPDATE subagent_batches b SET
    pending_count = b.pending_count + d.pending,
    queued_count = b.queued_count + d.queued,
    leased_count = b.leased_count + d.leased,
    running_count = b.running_count + d.running,
    succeeded_count = b.succeeded_count + d.succeeded,
    failed_count = b.failed_count + d.failed,
    cancelled_count = b.cancelled_count + d.cancelled,
    input_tokens = b.input_tokens + d.input_tokens,
    output_tokens = b.output_tokens + d.output_tokens,
    updated_at = now(),
    status = flotilla_next_batch_status(b.status, b.succeeded_count + d.succeeded, b.failed_count + d.failed,
      b.cancelled_count + d.cancelled, b.total),
    finished_at = CASE
      WHEN flotilla_next_batch_status(b.status, b.succeeded_count + d.succeeded, b.failed_count + d.failed,
        b.cancelled_count + d.cancelled, b.total) IS DISTINCT FROM b.status THEN now()
      ELSE b.finished_at END
  FROM d
  WHERE b.id = d.batch_id;
  RETURN NULL;
END
$$;
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
  v_alloc integer[];
  v_id uuid;
  v_left integer := p_limit;
  v_open integer;
  v_share integer;
  v_give integer;
  v_n integer;
  b record;
BEGIN
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

  PERFORM set_config('flotilla.counters', 'manual', true);
  FOR i IN 1..v_n LOOP
    IF v_alloc[i] > 0 THEN
      -- One statement per batch: the first v_alloc claimable rows in position order (queued and
      -- available, or pending within the live window's room) are leased; the rest of the pending
      -- rows taken into the window become queued; the batch row's counters move with them.
      RETURN QUERY
      WITH q AS (
        SELECT it.id, it.position, false AS from_pending FROM subagent_batch_items it
        WHERE it.batch_id = v_ids[i] AND it.status = 'queued'
          AND (it.available_at IS NULL OR it.available_at <= now())
        ORDER BY it.position LIMIT v_alloc[i]
        FOR UPDATE SKIP LOCKED
      ),
      p AS (
        SELECT it.id, it.position, true AS from_pending FROM subagent_batch_items it
        WHERE it.batch_id = v_ids[i] AND it.status = 'pending'
        ORDER BY it.position LIMIT v_free_live[i]
        FOR UPDATE SKIP LOCKED
      ),
      ranked AS (
        SELECT u.id, u.from_pending, (row_number() OVER (ORDER BY u.position)) <= v_alloc[i] AS lease
        FROM (SELECT * FROM q UNION ALL SELECT * FROM p) u
      ),
      upd AS (
        UPDATE subagent_batch_items it SET
          status = CASE WHEN r.lease THEN 'leased' ELSE 'queued' END,
          lease_owner = CASE WHEN r.lease THEN p_owner ELSE it.lease_owner END,
          lease_token = CASE WHEN r.lease THEN it.lease_token + 1 ELSE it.lease_token END,
          leased_at = CASE WHEN r.lease THEN now() ELSE it.leased_at END,
          lease_expires_at = CASE WHEN r.lease THEN now() + make_interval(secs => p_lease_seconds) ELSE it.lease_expires_at END,
          attempts = CASE WHEN r.lease THEN it.attempts + 1 ELSE it.attempts END,
          available_at = CASE WHEN r.lease THEN NULL ELSE it.available_at END,
          updated_at = now()
        FROM ranked r
        WHERE it.id = r.id AND (r.lease OR r.from_pending)
        RETURNING it.id, it.batch_id, it.item_key, it.position, it.prompt, it.lease_token, it.attempts, r.lease, r.from_pending
      ),
      agg AS (
        SELECT count(*) FILTER (WHERE upd.from_pending) AS promoted,
               count(*) FILTER (WHERE upd.lease) AS leased,
               count(*) FILTER (WHERE upd.lease AND NOT upd.from_pending) AS from_queue
        FROM upd
      ),
      bupd AS (
        UPDATE subagent_batches bt SET
          pending_count = bt.pending_count - agg.promoted,
          queued_count = bt.queued_count + (agg.promoted - (agg.leased - agg.from_queue)) - agg.from_queue,
          leased_count = bt.leased_count + agg.leased,
          last_claimed_at = clock_timestamp(),
          status = CASE WHEN bt.status = 'queued' AND agg.leased > 0 THEN 'running' ELSE bt.status END,
          started_at = CASE WHEN agg.leased > 0 THEN coalesce(bt.started_at, now()) ELSE bt.started_at END,
          updated_at = now()
        FROM agg
        WHERE bt.id = v_ids[i]
      )
      SELECT upd.id, upd.batch_id, upd.item_key, upd.position, upd.prompt, upd.lease_token, upd.attempts
      FROM upd WHERE upd.lease;
    ELSIF v_caps[i] = 0 THEN
      -- Nothing claimable right now (all deferred or at the limit): rotate it to the back.
      UPDATE subagent_batches s SET last_claimed_at = clock_timestamp() WHERE s.id = v_ids[i];
    END IF;
  END LOOP;
  PERFORM set_config('flotilla.counters', 'auto', true);
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
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM 1 FROM subagent_batches s
  WHERE s.id IN (SELECT i.batch_id FROM subagent_batch_items i WHERE i.id = ANY(p_ids))
  ORDER BY s.id FOR UPDATE;

  PERFORM set_config('flotilla.counters', 'manual', true);
  RETURN QUERY
  WITH upd AS (
    UPDATE subagent_batch_items it SET
      status = 'running',
      started_at = now(),
      lease_expires_at = now() + make_interval(secs => p_lease_seconds),
      updated_at = now()
    FROM unnest(p_ids, p_tokens) AS r(id, token)
    WHERE it.id = r.id AND it.lease_token = r.token AND it.lease_owner = p_owner
      AND it.status = 'leased' AND it.lease_expires_at > now()
    RETURNING it.id, it.batch_id
  ),
  d AS (SELECT upd.batch_id, count(*) AS n FROM upd GROUP BY upd.batch_id),
  bupd AS (
    UPDATE subagent_batches bt SET
      leased_count = bt.leased_count - d.n,
      running_count = bt.running_count + d.n,
      updated_at = now()
    FROM d WHERE bt.id = d.batch_id
  )
  SELECT upd.id FROM upd;
  PERFORM set_config('flotilla.counters', 'auto', true);
END
$$;
--> statement-breakpoint

CREATE OR REPLACE FUNCTION flotilla_settle_items(p_owner text, p_rows jsonb, p_max_deferrals integer)
RETURNS TABLE (item_id uuid, new_status text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM 1 FROM subagent_batches s
  WHERE s.id IN (
    SELECT i.batch_id FROM subagent_batch_items i
    WHERE i.id IN (SELECT (e->>'id')::uuid FROM jsonb_array_elements(p_rows) e)
  )
  ORDER BY s.id FOR UPDATE;

  PERFORM set_config('flotilla.counters', 'manual', true);
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
  ),
  d AS (
    SELECT plan.batch_id,
      count(*) FILTER (WHERE plan.next_status = 'queued') AS queued,
      count(*) FILTER (WHERE plan.old_status = 'leased') AS was_leased,
      count(*) FILTER (WHERE plan.old_status = 'running') AS was_running,
      count(*) FILTER (WHERE plan.next_status = 'succeeded') AS succeeded,
      count(*) FILTER (WHERE plan.next_status = 'failed') AS failed,
      sum(plan.input_tokens) AS input_tokens,
      sum(plan.output_tokens) AS output_tokens
    FROM plan GROUP BY plan.batch_id
  ),
  bupd AS (
    UPDATE subagent_batches bt SET
      queued_count = bt.queued_count + d.queued,
      leased_count = bt.leased_count - d.was_leased,
      running_count = bt.running_count - d.was_running,
      succeeded_count = bt.succeeded_count + d.succeeded,
      failed_count = bt.failed_count + d.failed,
      input_tokens = bt.input_tokens + d.input_tokens,
      output_tokens = bt.output_tokens + d.output_tokens,
      updated_at = now(),
      status = flotilla_next_batch_status(bt.status, bt.succeeded_count + d.succeeded, bt.failed_count + d.failed,
        bt.cancelled_count, bt.total),
      finished_at = CASE
        WHEN flotilla_next_batch_status(bt.status, bt.succeeded_count + d.succeeded, bt.failed_count + d.failed,
          bt.cancelled_count, bt.total) IS DISTINCT FROM bt.status THEN now()
        ELSE bt.finished_at END
    FROM d WHERE bt.id = d.batch_id
  )
  SELECT upd.id, upd.status FROM upd;
  PERFORM set_config('flotilla.counters', 'auto', true);
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
  PERFORM set_config('synchronous_commit', 'off', true);
  SELECT array_agg(DISTINCT e.batch_id) INTO v_batches FROM (
    SELECT i.batch_id FROM subagent_batch_items i
    WHERE i.status IN ('leased', 'running') AND i.lease_expires_at < now()
    LIMIT p_limit
  ) e;
  IF v_batches IS NULL THEN RETURN; END IF;

  PERFORM 1 FROM subagent_batches s WHERE s.id = ANY(v_batches) ORDER BY s.id FOR UPDATE;

  PERFORM set_config('flotilla.counters', 'manual', true);
  RETURN QUERY
  WITH cur AS (
    SELECT it.id, it.batch_id, it.attempts, it.lease_owner, it.leased_at, it.started_at, it.status AS old_status,
      bt.max_attempts,
      CASE WHEN it.attempts >= bt.max_attempts THEN 'failed' ELSE 'queued' END AS next_status,
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
      status = cur.next_status,
      error = cur.message,
      lease_owner = NULL,
      lease_expires_at = NULL,
      finished_at = CASE WHEN cur.next_status = 'failed' THEN now() ELSE NULL END,
      updated_at = now()
    FROM cur WHERE it.id = cur.id
    RETURNING it.id, it.status
  ),
  hist AS (
    INSERT INTO subagent_batch_item_attempts (item_id, batch_id, attempt, worker_id, outcome, error, leased_at, started_at, finished_at)
    SELECT cur.id, cur.batch_id, cur.attempts, coalesce(cur.lease_owner, 'unknown'), 'lease_expired', cur.message,
      coalesce(cur.leased_at, now()), CASE WHEN cur.old_status = 'running' THEN cur.started_at ELSE NULL END, now()
    FROM cur
  ),
  d AS (
    SELECT cur.batch_id,
      count(*) FILTER (WHERE cur.next_status = 'queued') AS queued,
      count(*) FILTER (WHERE cur.next_status = 'failed') AS failed,
      count(*) FILTER (WHERE cur.old_status = 'leased') AS was_leased,
      count(*) FILTER (WHERE cur.old_status = 'running') AS was_running
    FROM cur GROUP BY cur.batch_id
  ),
  bupd AS (
    UPDATE subagent_batches bt SET
      queued_count = bt.queued_count + d.queued,
      failed_count = bt.failed_count + d.failed,
      leased_count = bt.leased_count - d.was_leased,
      running_count = bt.running_count - d.was_running,
      updated_at = now(),
      status = flotilla_next_batch_status(bt.status, bt.succeeded_count, bt.failed_count + d.failed,
        bt.cancelled_count, bt.total),
      finished_at = CASE
        WHEN flotilla_next_batch_status(bt.status, bt.succeeded_count, bt.failed_count + d.failed,
          bt.cancelled_count, bt.total) IS DISTINCT FROM bt.status THEN now()
        ELSE bt.finished_at END
    FROM d WHERE bt.id = d.batch_id
  )
  SELECT upd.id, upd.status FROM upd;
  PERFORM set_config('flotilla.counters', 'auto', true);
END
$$;
--> statement-breakpoint
CREATE TRIGGER subagent_batch_items_counters
  AFTER UPDATE ON subagent_batch_items
  REFERENCING OLD TABLE AS old_items NEW TABLE AS new_items
  FOR EACH STATEMENT EXECUTE FUNCTION flotilla_batch_items_counters();
--> statement-breakpoint
-- A worker's completions and its next claim in one transaction. While it holds the locks of the
-- batches it settled it never waits for another batch (claim with p_wait = false).
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
