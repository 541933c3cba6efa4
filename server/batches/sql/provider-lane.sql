-- The providers' batch lanes (server/batches/provider-lane/): items of `lane = 'provider_batch'`
-- batches go to the provider as provider batches (provider_batches rows). An item at the provider
-- is `running` with its provider_batch_id set and no lease: it holds no slot, lease recovery
-- (recover.sql) leaves it alone, and cancel.sql leaves it for the lane, which cancels at the
-- provider and keeps what finished. One worker at a time polls a provider batch, under the row's
-- lease; a crashed poller's lease lapses and the next worker to lease it takes over.

-- Take: up to p_limit claimable items (queued and available, or pending) of one provider_batch
-- batch that is queued or running (a paused one sends nothing new), into a new provider batch in
-- state `submitting` leased to p_owner. Each item takes an attempt. Batches are visited least
-- recently claimed first, skipping any another transaction holds.
create or replace function flotilla_provider_take(
  p_owner text, p_limit integer, p_lease_seconds double precision
) returns table (provider_batch_id uuid, batch_id uuid, item_id uuid, prompt text, attempt integer, feedback text)
language plpgsql as $$
#variable_conflict use_column
declare
  v_batch uuid;
  v_user uuid;
  v_pb uuid;
  v_pilot integer;
begin
  -- A pilot (claim.sql) holds back every position past N.
  select s.id, s.user_id, s.pilot into v_batch, v_user, v_pilot from subagent_batches s
   where s.lane = 'provider_batch' and s.status in ('queued', 'running')
     and (s.queued_count > 0 or s.pending_count > 0)
     and (s.pilot is null or s.total - s.pending_count - s.queued_count < s.pilot)
   order by s.last_claimed_at nulls first, s.id
   limit 1
     for update skip locked;
  if v_batch is null then return; end if;

  insert into provider_batches (user_id, batch_id, provider, state, lease_owner, lease_expires_at)
  values (v_user, v_batch, coalesce((select s.execution_spec->>'batch_provider' from subagent_batches s where s.id = v_batch), 'unknown'), 'submitting', p_owner, now() + make_interval(secs => p_lease_seconds))
  returning id into v_pb;

  return query
  with picked as (
    select it.id from subagent_batch_items it
     where it.batch_id = v_batch
       and (it.status = 'pending' or (it.status = 'queued' and (it.available_at is null or it.available_at <= now())))
       and (v_pilot is null or it.position <= v_pilot)
     order by it.position
     limit p_limit
       for update skip locked
  ),
  upd as (
    update subagent_batch_items it set
      status = 'running',
      provider_batch_id = v_pb,
      attempts = it.attempts + 1,
      lease_owner = null,
      lease_expires_at = null,
      leased_at = now(),
      started_at = now(),
      available_at = null,
      updated_at = now()
      from picked where it.id = picked.id
    returning it.id, it.prompt, it.attempts, case when it.error like 'check_failed: %' then it.error end as feedback
  )
  select v_pb, v_batch, upd.id, upd.prompt, upd.attempts, upd.feedback from upd;

  update provider_batches p set requests = (select count(*) from subagent_batch_items it where it.provider_batch_id = v_pb and it.status = 'running')
   where p.id = v_pb;
  update subagent_batches s set
    last_claimed_at = clock_timestamp(),
    status = case when s.status = 'queued' then 'running' else s.status end,
    started_at = coalesce(s.started_at, now())
   where s.id = v_batch;
end
$$;

-- Lease: up to p_limit provider batches due for a poll (their next_poll_at passed) that nobody
-- holds, whose holder's lease lapsed, or that p_owner holds already. On a takeover, items the dead
-- poller held for settling go back to the provider (their results are fetched again), and a batch
-- it was still submitting is abandoned: its items go back to the queue with the attempt refunded.
create or replace function flotilla_provider_lease(p_owner text, p_lease_seconds double precision, p_limit integer)
returns table (id uuid, batch_id uuid, provider text, external_id text, input_file_id text, state text, polls integer)
language plpgsql as $$
#variable_conflict use_column
declare
  v_ids uuid[];
  v_abandoned uuid[];
begin
  select array_agg(p.id) into v_ids from (
    select p.id from provider_batches p
     where p.state in ('submitting', 'in_progress', 'canceling', 'ended')
       and p.next_poll_at <= now()
       and (p.lease_owner is null or p.lease_owner = p_owner or p.lease_expires_at < now())
       -- This worker's own submission in flight is its own business until its lease lapses.
       and not (p.state = 'submitting' and p.lease_owner = p_owner and p.lease_expires_at >= now())
     order by p.next_poll_at
     limit p_limit
       for update skip locked
  ) p;
  if v_ids is null then return; end if;

  select array_agg(p.id) into v_abandoned from provider_batches p where p.id = any(v_ids) and p.state = 'submitting';
  if v_abandoned is not null then
    perform flotilla_lock_batches(array(select it.id from subagent_batch_items it
      where it.provider_batch_id = any(v_abandoned) and it.status = 'running'));
    update subagent_batch_items it set
      status = 'queued', attempts = greatest(it.attempts - 1, 0), lease_owner = null, lease_expires_at = null,
      error = 'the worker sending it to the provider stopped before the provider answered; queued again',
      updated_at = now()
     where it.provider_batch_id = any(v_abandoned) and it.status = 'running';
    update provider_batches p set state = 'abandoned', lease_owner = null, lease_expires_at = null, ended_at = now()
     where p.id = any(v_abandoned);
  end if;

  -- Holds a dead poller left (it was settling them): back at the provider.
  update subagent_batch_items it set lease_owner = null, lease_expires_at = null
   where it.provider_batch_id = any(v_ids) and it.status = 'running'
     and it.lease_owner is not null and it.lease_owner <> p_owner and it.lease_expires_at < now();

  return query
  update provider_batches p set lease_owner = p_owner, lease_expires_at = now() + make_interval(secs => p_lease_seconds),
         polls = p.polls + case when p.state in ('in_progress', 'canceling') then 1 else 0 end
   where p.id = any(v_ids) and p.state <> 'abandoned'
  returning p.id, p.batch_id, p.provider, p.external_id, p.input_file_id, p.state, p.polls;
end
$$;

-- Hold: items of one provider batch still at the provider, taken under an item lease by the
-- poller that holds the provider batch, to settle them (p_live false: they stay `running`, settle.sql
-- ends them, fenced by the lease) or to run them on the live lane (p_live true: `leased`, unlinked
-- from the provider batch, and handed to the worker's slots like any claimed item).
create or replace function flotilla_provider_hold(
  p_owner text, p_pb uuid, p_ids uuid[], p_lease_seconds double precision, p_live boolean
) returns table (item_id uuid, batch_id uuid, item_key text, item_position integer, prompt text, lease_token bigint,
                 attempt integer, expected jsonb, feedback text, generation integer)
language plpgsql as $$
#variable_conflict use_column
begin
  if not exists (select 1 from provider_batches p where p.id = p_pb and p.lease_owner = p_owner and p.lease_expires_at > now()) then
    return;
  end if;
  perform flotilla_lock_batches(p_ids);
  return query
  update subagent_batch_items it set
    status = case when p_live then 'leased' else it.status end,
    provider_batch_id = case when p_live then null else it.provider_batch_id end,
    lease_owner = p_owner,
    lease_token = it.lease_token + 1,
    leased_at = case when p_live then now() else it.leased_at end,
    lease_expires_at = now() + make_interval(secs => p_lease_seconds),
    updated_at = now()
   where it.id = any(p_ids) and it.provider_batch_id = p_pb and it.status = 'running' and it.lease_owner is null
  returning it.id, it.batch_id, it.item_key, it.position, it.prompt, it.lease_token, it.attempts, it.expected,
    case when it.error like 'check_failed: %' then it.error end, it.generation;
end
$$;

-- The rest of a provider batch of a cancelled batch (requests the provider cancelled, or that never
-- ran): cancelled, as cancel.sql would have.
create or replace function flotilla_provider_cancel_rest(p_owner text, p_pb uuid) returns integer language plpgsql as $$
declare
  v_n integer;
  v_batch uuid;
begin
  select p.batch_id into v_batch from provider_batches p where p.id = p_pb and p.lease_owner = p_owner;
  if v_batch is null then return 0; end if;
  perform 1 from subagent_batches s where s.id = v_batch for update;
  update subagent_batch_items it set status = 'cancelled', lease_owner = null, lease_expires_at = null,
         error = coalesce(it.error, 'batch cancelled'), finished_at = now(), updated_at = now()
   where it.provider_batch_id = p_pb and it.status = 'running' and it.lease_owner is null;
  get diagnostics v_n = row_count;
  return v_n;
end
$$;

-- Release: items of a provider batch this worker is still submitting back to the queue, attempt
-- refunded (those past the provider's size limit, or all of them when the provider refused the
-- batch: then not before p_delay_seconds). A provider batch left with no item is abandoned.
create or replace function flotilla_provider_release(
  p_owner text, p_pb uuid, p_ids uuid[], p_error text, p_delay_seconds double precision
) returns integer language plpgsql as $$
declare
  v_n integer;
begin
  if not exists (select 1 from provider_batches p where p.id = p_pb and p.lease_owner = p_owner and p.state = 'submitting') then
    return 0;
  end if;
  perform flotilla_lock_batches(p_ids);
  update subagent_batch_items it set
    status = 'queued', attempts = greatest(it.attempts - 1, 0), provider_batch_id = null,
    error = coalesce(p_error, it.error),
    available_at = case when p_delay_seconds > 0 then now() + make_interval(secs => p_delay_seconds) end,
    updated_at = now()
   where it.id = any(p_ids) and it.provider_batch_id = p_pb and it.status = 'running' and it.lease_owner is null;
  get diagnostics v_n = row_count;
  update provider_batches p set requests = greatest(p.requests - v_n, 0) where p.id = p_pb;
  update provider_batches p set state = 'abandoned', last_error = p_error, lease_owner = null, lease_expires_at = null, ended_at = now()
   where p.id = p_pb and not exists (select 1 from subagent_batch_items it where it.provider_batch_id = p_pb and it.status = 'running');
  return v_n;
end
$$;
