-- Cancel: every unfinished item of a batch becomes cancelled with its lease cleared, in the
-- caller's transaction (cancelBatch, which holds the batch row lock and marks the batch first).
-- A worker still running one of them finds its lease gone: it aborts the model call, and its
-- late completion is fenced out. Attempts in flight end in the history as `cancelled`. Items at
-- a provider (provider-lane.sql) are left to the provider lane.
create or replace function flotilla_cancel_items(p_batch uuid) returns void language plpgsql as $$
declare
  v_ids uuid[];
  v_attempt integer[];
  v_worker text[];
  v_leased timestamptz[];
  v_started timestamptz[];
begin
  with cur as (
    select it.id, it.status as old_status, it.attempts, it.lease_owner, it.leased_at, it.started_at
      from subagent_batch_items it
     where it.batch_id = p_batch and it.status in ('pending', 'queued', 'leased', 'running', 'awaiting_approval')
       -- At the provider: the provider lane cancels there, keeps what finished and cancels the rest.
       and not (it.status = 'running' and it.provider_batch_id is not null and it.lease_owner is null)
       for update
  ),
  upd as (
    update subagent_batch_items it
       set status = 'cancelled', lease_owner = null, lease_expires_at = null,
           available_at = null, finished_at = now(), updated_at = now()
      from cur where it.id = cur.id
    returning cur.*
  )
  select array_agg(upd.id), array_agg(upd.attempts), array_agg(upd.lease_owner), array_agg(upd.leased_at),
         array_agg(case when upd.old_status = 'running' then upd.started_at end)
    into v_ids, v_attempt, v_worker, v_leased, v_started
    from upd where upd.old_status in ('leased', 'running');
  if v_ids is null then return; end if;
  perform flotilla_record_attempts(v_ids, array_fill(p_batch, array[cardinality(v_ids)]), v_attempt, v_worker,
    array_fill('cancelled'::text, array[cardinality(v_ids)]), array_fill('batch cancelled'::text, array[cardinality(v_ids)]),
    array_fill(null::uuid, array[cardinality(v_ids)]), v_leased, v_started);
end
$$;
