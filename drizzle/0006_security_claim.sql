-- Issue 16 (many users on one deployment): the claim shares free slots between users first
-- and their batches second, and lease recovery refunds the attempt of an item that never
-- started. Self-contained: every function is created or replaced whole.

-- Water-filling: `p_total` units spread as evenly as possible over slots with room `p_caps`
-- (equal shares, leftovers to those with more room). Returns one allocation per slot.
CREATE OR REPLACE FUNCTION flotilla_water_fill(p_caps integer[], p_total integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_n integer := coalesce(cardinality(p_caps), 0);
  v_alloc integer[];
  v_left integer := greatest(coalesce(p_total, 0), 0);
  v_open integer;
  v_share integer;
  v_give integer;
BEGIN
  IF v_n = 0 THEN RETURN '{}'; END IF;
  v_alloc := array_fill(0, ARRAY[v_n]);
  LOOP
    SELECT count(*) INTO v_open FROM generate_subscripts(p_caps, 1) g WHERE p_caps[g] > v_alloc[g];
    EXIT WHEN v_left <= 0 OR v_open = 0;
    v_share := greatest(1, ceil(v_left::numeric / v_open)::integer);
    FOR i IN 1..v_n LOOP
      v_give := least(v_share, p_caps[i] - v_alloc[i], v_left);
      IF v_give > 0 THEN
        v_alloc[i] := v_alloc[i] + v_give;
        v_left := v_left - v_give;
      END IF;
    END LOOP;
  END LOOP;
  RETURN v_alloc;
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
  v_users uuid[] := '{}';
  v_user_list uuid[];
  v_user_caps integer[];
  v_user_alloc integer[];
  v_members integer[];
  v_member_caps integer[];
  v_member_alloc integer[];
  v_id uuid;
  v_n integer;
  b record;
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  IF p_limit IS NULL OR p_limit <= 0 THEN RETURN; END IF;

  -- User first, batch second: every user's least recently claimed batch comes before anyone's
  -- second one, users ordered by when any of their batches was last claimed.
  SELECT array_agg(c.id ORDER BY c.ord) INTO v_candidates
  FROM (
    SELECT r.id, row_number() OVER (ORDER BY r.user_rank, r.user_last NULLS FIRST, r.user_id, r.last_claimed_at NULLS FIRST, r.id) AS ord
    FROM (
      SELECT s.id, s.user_id, s.last_claimed_at,
        row_number() OVER (PARTITION BY s.user_id ORDER BY s.last_claimed_at NULLS FIRST, s.id) AS user_rank,
        max(s.last_claimed_at) OVER (PARTITION BY s.user_id) AS user_last
      FROM subagent_batches s
      WHERE s.status IN ('queued', 'running')
        AND (s.queued_count > 0 OR s.pending_count > 0)
        AND s.leased_count + s.running_count < s.max_running_items
    ) r
    ORDER BY r.user_rank, r.user_last NULLS FIRST, r.user_id, r.last_claimed_at NULLS FIRST, r.id
    LIMIT p_max_batches
  ) c;
  IF v_candidates IS NULL THEN RETURN; END IF;

  FOREACH v_id IN ARRAY v_candidates LOOP
    SELECT * INTO b FROM subagent_batches s
      WHERE s.id = v_id AND s.status IN ('queued', 'running') FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
      v_ids := v_ids || b.id;
      v_users := v_users || b.user_id;
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
    v_users := ARRAY[b.user_id];
    v_free_live := ARRAY[greatest(b.max_live_items - b.queued_count - b.leased_count - b.running_count, 0)];
    v_caps := ARRAY[greatest(least(
      b.max_running_items - b.leased_count - b.running_count,
      b.queued_count + least(b.pending_count, greatest(b.max_live_items - b.queued_count - b.leased_count - b.running_count, 0))
    ), 0)];
  END IF;

  -- Fair share in two levels: the free slots are water-filled across users (each user's room
  -- is the sum of their batches' room), then each user's share across that user's batches.
  v_n := cardinality(v_ids);
  v_alloc := array_fill(0, ARRAY[v_n]);
  SELECT array_agg(u.user_id ORDER BY u.first), array_agg(u.cap ORDER BY u.first)
    INTO v_user_list, v_user_caps
  FROM (
    SELECT x.user_id, min(x.i) AS first, sum(x.cap)::integer AS cap
    FROM unnest(v_users, v_caps) WITH ORDINALITY AS x(user_id, cap, i)
    GROUP BY x.user_id
  ) u;
  v_user_alloc := flotilla_water_fill(v_user_caps, p_limit);
  FOR u IN 1..cardinality(v_user_list) LOOP
    SELECT array_agg(g ORDER BY g), array_agg(v_caps[g] ORDER BY g) INTO v_members, v_member_caps
      FROM generate_subscripts(v_ids, 1) g WHERE v_users[g] = v_user_list[u];
    v_member_alloc := flotilla_water_fill(v_member_caps, v_user_alloc[u]);
    FOR k IN 1..cardinality(v_members) LOOP
      v_alloc[v_members[k]] := v_member_alloc[k];
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
      -- Only execution that really started consumes an attempt: a lease that expired while
      -- still `leased` gives its attempt back and never fails the item.
      (it.status = 'leased') AS refund,
      CASE WHEN it.status = 'running' AND it.attempts >= bt.max_attempts THEN 'failed' ELSE 'queued' END AS next_status,
      CASE WHEN it.status = 'leased' THEN
        'lease expired before the item started (worker ' || coalesce(it.lease_owner, 'unknown') ||
          ' stopped renewing it); attempt not counted, retrying'
      ELSE
        'lease expired on attempt ' || it.attempts || ' of ' || bt.max_attempts || ' (worker ' ||
          coalesce(it.lease_owner, 'unknown') || ' stopped renewing it while running)' ||
          CASE WHEN it.attempts >= bt.max_attempts THEN '; no attempts left' ELSE '; retrying' END
      END AS message
    FROM subagent_batch_items it
    JOIN subagent_batches bt ON bt.id = it.batch_id
    WHERE it.batch_id = ANY(v_batches) AND it.status IN ('leased', 'running') AND it.lease_expires_at < now()
    LIMIT p_limit
    FOR UPDATE OF it SKIP LOCKED
  ),
  upd AS (
    UPDATE subagent_batch_items it SET
      status = cur.next_status,
      attempts = CASE WHEN cur.refund THEN greatest(it.attempts - 1, 0) ELSE it.attempts END,
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
