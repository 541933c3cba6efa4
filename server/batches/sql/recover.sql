-- Lease expiry: rows whose holder stopped renewing go back to queued. Only execution that
-- really started consumes an attempt: a lease that expired while still `leased` (claimed, or
-- waiting in a local queue) gives its attempt back and never fails the item; a running one at
-- max_attempts fails with an error that says so. Safe to call from every worker.
create or replace function flotilla_recover(p_limit integer default 500)
returns table (item_id uuid, new_status text) language plpgsql as $$
#variable_conflict use_column
declare
  v_expired uuid[];
  v_ids uuid[];
  v_status text[];
  v_batch uuid[];
  v_attempt integer[];
  v_worker text[];
  v_error text[];
  v_leased timestamptz[];
  v_started timestamptz[];
begin
  perform set_config('synchronous_commit', 'off', true);
  select array_agg(i.id) into v_expired from (
    select i.id from subagent_batch_items i
     where i.status in ('leased', 'running') and i.lease_expires_at < now()
       -- Held for settling by a provider batch's poller: the next poller takes them (provider-lane.sql).
       and not (i.status = 'running' and i.provider_batch_id is not null)
     limit p_limit
  ) i;
  if v_expired is null then return; end if;
  perform flotilla_lock_batches(v_expired);

  with cur as (
    select it.id, it.batch_id, it.attempts, it.lease_owner, it.leased_at, it.started_at, it.status as old_status,
      (it.status = 'leased') as refund,
      case when it.status = 'running' and it.attempts >= bt.max_attempts then 'failed' else 'queued' end as next_status,
      case when it.status = 'leased' then
        'lease expired before the item started (worker ' || coalesce(it.lease_owner, 'unknown') ||
          ' stopped renewing it); attempt not counted, retrying'
      else
        'lease expired on attempt ' || it.attempts || ' of ' || bt.max_attempts || ' (worker ' ||
          coalesce(it.lease_owner, 'unknown') || ' stopped renewing it while running)' ||
          case when it.attempts >= bt.max_attempts then '; no attempts left' else '; retrying' end
      end as message
    from subagent_batch_items it
    join subagent_batches bt on bt.id = it.batch_id
    where it.id = any(v_expired) and it.status in ('leased', 'running') and it.lease_expires_at < now()
      and not (it.status = 'running' and it.provider_batch_id is not null)
    for update of it skip locked
  ),
  upd as (
    update subagent_batch_items it set
      status = cur.next_status,
      attempts = case when cur.refund then greatest(it.attempts - 1, 0) else it.attempts end,
      error = cur.message,
      lease_owner = null,
      lease_expires_at = null,
      finished_at = case when cur.next_status = 'failed' then now() else null end,
      updated_at = now()
    from cur where it.id = cur.id
    returning it.id, it.status, cur.batch_id, cur.attempts, cur.lease_owner, cur.message, cur.leased_at,
      case when cur.old_status = 'running' then cur.started_at end as started_at
  )
  select array_agg(upd.id), array_agg(upd.status), array_agg(upd.batch_id), array_agg(upd.attempts),
         array_agg(upd.lease_owner), array_agg(upd.message), array_agg(upd.leased_at), array_agg(upd.started_at)
    into v_ids, v_status, v_batch, v_attempt, v_worker, v_error, v_leased, v_started
    from upd;
  if v_ids is null then return; end if;
  perform flotilla_record_attempts(v_ids, v_batch, v_attempt, v_worker,
    array_fill('lease_expired'::text, array[cardinality(v_ids)]), v_error,
    array_fill(null::uuid, array[cardinality(v_ids)]), v_leased, v_started);
  return query select * from unnest(v_ids, v_status);
end
$$;
