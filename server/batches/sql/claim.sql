-- Claim: promote pending rows into the live window and lease items for one worker, in one
-- statement per batch.
--
-- `p_run` rows are for the worker's slots free right now, `p_ahead` more for its local queue.
-- All stay `leased` until a slot really starts them (mark-running.sql): a row is written
-- `running` only when execution starts, after the process capacity admitted it. Leased rows
-- count toward
-- max_running_items exactly like running ones, so the running limit stays exact; and a row is
-- queued locally only from a batch's spare room (its limit minus every live worker's slots
-- minus the rows already leased), so a local queue never holds a row another worker's free slot
-- could run now.
--
-- Fairness: batches are visited user first, batch second (every user's least recently claimed
-- batch before anyone's second one); free slots are water-filled across users, then batches
-- (fair-share.sql). Each claim takes one attempt and a fresh fencing token per row.
--
-- Each row carries what the executor needs besides the prompt: the item's `expected` (for the
-- checks) and `feedback`, the error of an attempt a `retry` check failed (`check_failed: ...`),
-- which the next attempt's prompt quotes; `resume`, whether the item has stored steps
-- (steps.sql) for the executor to continue from instead of starting over; and `generation`, the
-- run of the item its tool calls' idempotency keys name (steps.ts).
--
-- Pilot (`pilot` N set): only items at positions 1..N are claimed or promoted, and a batch's
-- running room is also bounded by the pilot's unstarted items (N minus every item that left
-- pending/queued: while `pilot` is set only those N can have), so no item past N starts before
-- the person resumes however many workers claim; the loop trigger pauses the batch once N finished.
create or replace function flotilla_claim(
  p_owner text, p_run integer, p_ahead integer, p_lease_seconds double precision,
  p_max_batches integer default 8, p_wait boolean default true
) returns table (item_id uuid, batch_id uuid, item_key text, item_position integer, prompt text,
                 lease_token bigint, attempt integer, expected jsonb, feedback text, resume boolean, generation integer)
language plpgsql as $$
#variable_conflict use_column
declare
  v_candidates uuid[];
  v_ids uuid[];
  v_users uuid[];
  v_room integer[];      -- running room: limit minus leased and running
  v_free_live integer[]; -- live window room: pending rows that may be promoted
  v_spare integer[];     -- room for local queues
  v_pilot integer[];     -- the last claimable position while a pilot holds the rest back (null: none)
  v_got integer;
  v_run integer[];
  v_ahead integer[];
  v_slots integer := 0;
begin
  perform set_config('synchronous_commit', 'off', true);
  p_run := greatest(coalesce(p_run, 0), 0);
  p_ahead := greatest(coalesce(p_ahead, 0), 0);
  if p_run + p_ahead = 0 then return; end if;

  select array_agg(c.id order by c.ord) into v_candidates
  from (
    select r.id, row_number() over (order by r.user_rank, r.user_last nulls first, r.user_id, r.last_claimed_at nulls first, r.id) as ord
    from (
      select s.id, s.user_id, s.last_claimed_at,
        row_number() over (partition by s.user_id order by s.last_claimed_at nulls first, s.id) as user_rank,
        max(s.last_claimed_at) over (partition by s.user_id) as user_last
      from subagent_batches s
      where s.status in ('queued', 'running') and s.lane = 'live'
        and (s.queued_count > 0 or s.pending_count > 0)
        and s.leased_count + s.running_count < s.max_running_items
        and (s.pilot is null or s.total - s.pending_count - s.queued_count < s.pilot)
    ) r
    order by r.user_rank, r.user_last nulls first, r.user_id, r.last_claimed_at nulls first, r.id
    limit p_max_batches
  ) c;
  if v_candidates is null then return; end if;

  if p_ahead > 0 then
    select coalesce(sum(h.capacity), 0)::integer into v_slots from worker_heartbeats h
     where h.kind = 'worker' and h.stopped_at is null and h.last_heartbeat_at > now() - interval '30 seconds';
  end if;

  -- Lock what is free now without waiting (order does not matter when nothing waits).
  select array_agg(x.id order by array_position(v_candidates, x.id)) into v_ids
    from (select s.id from subagent_batches s
           where s.id = any(v_candidates) and s.status in ('queued', 'running')
             for update skip locked) x;
  if v_ids is null and p_wait then
    -- Every candidate is held by another transaction: wait for the fairest one, but only when
    -- the caller holds no batch lock itself (p_wait), so waiting can never close a cycle.
    perform 1 from subagent_batches s where s.id = v_candidates[1] and s.status in ('queued', 'running') for update;
    if found then v_ids := array[v_candidates[1]]; end if;
  end if;
  if v_ids is null then return; end if;

  select array_agg(s.user_id order by x.k),
         array_agg(greatest(least(
           s.max_running_items - s.leased_count - s.running_count,
           s.queued_count + least(s.pending_count, greatest(s.max_live_items - s.queued_count - s.leased_count - s.running_count, 0)),
           coalesce(s.pilot - (s.total - s.pending_count - s.queued_count), s.total)
         ), 0) order by x.k),
         array_agg(greatest(s.max_live_items - s.queued_count - s.leased_count - s.running_count, 0) order by x.k),
         array_agg(greatest(s.max_running_items - v_slots - s.leased_count, 0) order by x.k),
         array_agg(s.pilot order by x.k)
    into v_users, v_room, v_free_live, v_spare, v_pilot
    from unnest(v_ids) with ordinality as x(id, k) join subagent_batches s on s.id = x.id;

  v_run := flotilla_fair_share(v_users, v_room, p_run);
  v_ahead := flotilla_fair_share(v_users,
    array(select least(v_room[g] - v_run[g], v_spare[g]) from generate_subscripts(v_ids, 1) g order by g), p_ahead);

  for i in 1..cardinality(v_ids) loop
    if v_run[i] + v_ahead[i] > 0 then
      -- The first run + ahead claimable rows in position order (queued and available, or pending
      -- within the live window's room) are leased; the rest of the pending rows taken into the
      -- window become queued (promotion).
      return query
      with q as (
        select it.id, it.position, false as from_pending from subagent_batch_items it
         where it.batch_id = v_ids[i] and it.status = 'queued'
           and (it.available_at is null or it.available_at <= now())
           and (v_pilot[i] is null or it.position <= v_pilot[i])
         order by it.position limit v_run[i] + v_ahead[i]
           for update skip locked
      ),
      p as (
        select it.id, it.position, true as from_pending from subagent_batch_items it
         where it.batch_id = v_ids[i] and it.status = 'pending'
           and (v_pilot[i] is null or it.position <= v_pilot[i])
         order by it.position limit v_free_live[i]
           for update skip locked
      ),
      ranked as (
        select u.id, u.from_pending, row_number() over (order by u.position) as rn
          from (select * from q union all select * from p) u
      ),
      upd as (
        update subagent_batch_items it set
          status = case when r.rn <= v_run[i] + v_ahead[i] then 'leased' else 'queued' end,
          lease_owner = case when r.rn <= v_run[i] + v_ahead[i] then p_owner else it.lease_owner end,
          lease_token = case when r.rn <= v_run[i] + v_ahead[i] then it.lease_token + 1 else it.lease_token end,
          leased_at = case when r.rn <= v_run[i] + v_ahead[i] then now() else it.leased_at end,
          lease_expires_at = case when r.rn <= v_run[i] + v_ahead[i] then now() + make_interval(secs => p_lease_seconds)
                                  else it.lease_expires_at end,
          attempts = case when r.rn <= v_run[i] + v_ahead[i] then it.attempts + 1 else it.attempts end,
          available_at = case when r.rn <= v_run[i] + v_ahead[i] then null else it.available_at end,
          updated_at = now()
          from ranked r
         where it.id = r.id and (r.rn <= v_run[i] + v_ahead[i] or r.from_pending)
        returning it.id, it.batch_id, it.item_key, it.position, it.prompt, it.lease_token, it.attempts, r.rn,
          it.expected, case when it.error like 'check_failed: %' then it.error end as feedback, it.generation
      )
      select upd.id, upd.batch_id, upd.item_key, upd.position, upd.prompt, upd.lease_token, upd.attempts,
             upd.expected, upd.feedback,
             exists (select 1 from subagent_batch_item_steps st where st.item_id = upd.id), upd.generation
        from upd where upd.rn <= v_run[i] + v_ahead[i];
      get diagnostics v_got = row_count;
    else
      v_got := 0;
    end if;
    -- A claimed batch goes to the back of the round-robin (and starts running); one with nothing
    -- claimable right now (all deferred or at its limit) is rotated back too.
    update subagent_batches s set
      last_claimed_at = clock_timestamp(),
      status = case when s.status = 'queued' and v_got > 0 then 'running' else s.status end,
      started_at = case when v_got > 0 then coalesce(s.started_at, now()) else s.started_at end
     where s.id = v_ids[i] and (v_got > 0 or v_room[i] = 0);
  end loop;
end
$$;
