-- Retry: finished items back to work with fresh attempts, in position order queued while the
-- batch's live window has room and pending after it (so the window still bounds live work);
-- their answer, output, checks, verdict and error cleared (their ended attempts stay in the
-- attempt history); a completed or failed batch reopens as running when anything moved, with
-- `reopened_at` (its elapsed time and throughput count from there, not across the idle time). In the
-- caller's transaction, which holds the batch row lock and has checked the batch is not
-- cancelled. The counters trigger moves the status, verdict and check counts with the items.
-- A retry runs the item from the start: durable steps an unfinished execution left (a cancel, a
-- lease that expired on the last attempt) are dropped, and its `generation` advances so the new
-- run's tool calls carry new idempotency keys (steps.ts): its writes are not replays.

-- One item (retryItem, which checked it is finished). Returns the item's new status.
create or replace function flotilla_retry_item(p_batch uuid, p_item uuid) returns text language sql as $$
  delete from subagent_batch_item_steps st using subagent_batch_items it
   where st.item_id = p_item and it.id = p_item and it.batch_id = p_batch and it.status in ('succeeded', 'failed', 'cancelled');
  update subagent_batches b set status = 'running', finished_at = null, reopened_at = now(), updated_at = now()
   where b.id = p_batch and b.status in ('completed', 'failed');
  update subagent_batch_items it set
    status = case when b.queued_count + b.leased_count + b.running_count < b.max_live_items then 'queued' else 'pending' end,
    attempts = 0, deferrals = 0, generation = it.generation + 1, available_at = null, error = null, finished_at = null, started_at = null,
    result = null, preview = null, output = null, checks = null, verdict = null,
    updated_at = now()
  from subagent_batches b
  where b.id = p_batch and it.id = p_item and it.batch_id = p_batch and it.status in ('succeeded', 'failed', 'cancelled')
  returning it.status;
$$;

-- Every finished item of the batch matching all the filters given (null: not filtering):
-- one of `p_statuses`, a failed verdict, a failed check named `p_check` (retryBatch). Returns
-- how many moved.
create or replace function flotilla_retry_items(p_batch uuid, p_statuses text[], p_failed_verdict boolean, p_check text)
returns integer language sql as $$
  with b as (
    select greatest(max_live_items - (queued_count + leased_count + running_count), 0) as room
      from subagent_batches where id = p_batch
  ), matching as (
    select it.id, row_number() over (order by it.position) as n
      from subagent_batch_items it
     where it.batch_id = p_batch
       and it.status in ('succeeded', 'failed', 'cancelled')
       and (p_statuses is null or it.status = any (p_statuses))
       and (not p_failed_verdict or it.verdict = 'failed')
       and (p_check is null or it.checks @> jsonb_build_array(jsonb_build_object('name', p_check, 'passed', false)))
  ), reopened as (
    update subagent_batches set status = 'running', finished_at = null, reopened_at = now(), updated_at = now()
     where id = p_batch and status in ('completed', 'failed') and exists (select 1 from matching)
  ), moved as (
    update subagent_batch_items it set
      status = case when matching.n <= b.room then 'queued' else 'pending' end,
      attempts = 0, deferrals = 0, generation = it.generation + 1, available_at = null, error = null, finished_at = null, started_at = null,
      result = null, preview = null, output = null, checks = null, verdict = null,
      updated_at = now()
    from matching, b
    where it.id = matching.id
    returning it.id
  ), dropped as (
    delete from subagent_batch_item_steps st using moved where st.item_id = moved.id
  )
  select count(*)::int from moved;
$$;
