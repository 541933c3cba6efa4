-- One round trip of the worker loop, in one transaction: mark running what slots started, settle
-- what finished, then claim for the free slots and the local queue. Measured on issue 17:
-- settle-then-claim as two calls cost a round trip and a commit per wave of 64 slots, the running
-- mark as its own call another; a zero-latency item now starts, runs and ends within one pass.
--
-- Rows: kind 'settled' (item_id, status = its new status), 'marked' (item_id, status 'running'),
-- 'claimed' (the claim's columns, status 'leased'; the first row of each batch also carries the
-- batch's execution spec, so a worker meeting a batch for the first time needs no second round
-- trip before it starts the item: measured on issue 22, that read was a third of the
-- add-to-start latency of a one-item batch). The batches of
-- the settled and marked items are locked once, in id order, before either moves; holding them,
-- the claim never waits for a batch another worker holds (p_wait = false), so it can come back
-- empty under contention (the loop simply claims again on its next pass).
create or replace function flotilla_worker_pass(
  p_owner text, p_settle jsonb, p_mark_ids uuid[], p_mark_tokens bigint[], p_max_deferrals integer,
  p_run integer, p_ahead integer, p_lease_seconds double precision, p_max_batches integer default 8
) returns table (kind text, item_id uuid, status text, batch_id uuid, item_key text, item_position integer,
                 prompt text, lease_token bigint, attempt integer, expected jsonb, feedback text, resume boolean, generation integer,
                 execution_spec jsonb)
language plpgsql as $$
#variable_conflict use_column
declare
  v_held uuid[] := coalesce(p_mark_ids, '{}') || array(select (e->>'id')::uuid from jsonb_array_elements(coalesce(p_settle, '[]')) e);
begin
  perform set_config('synchronous_commit', 'off', true);
  -- Run rows before any batch lock (run-rows.sql); the settle below finds them written.
  if jsonb_array_length(coalesce(p_settle, '[]')) > 0 then
    perform flotilla_settle_run_rows(p_settle);
  end if;
  if cardinality(v_held) > 0 then
    perform flotilla_lock_batches(v_held);
  end if;
  if coalesce(cardinality(p_mark_ids), 0) > 0 then
    -- Before the settle: an item may have started and finished since the last pass.
    return query select 'marked', m.item_id, 'running', null::uuid, null::text, null::integer, null::text, null::bigint, null::integer, null::jsonb, null::text, null::boolean, null::integer, null::jsonb
      from flotilla_mark_running(p_owner, p_mark_ids, p_mark_tokens, p_lease_seconds) m;
  end if;
  if jsonb_array_length(coalesce(p_settle, '[]')) > 0 then
    return query select 'settled', s.item_id, s.new_status, null::uuid, null::text, null::integer, null::text, null::bigint, null::integer, null::jsonb, null::text, null::boolean, null::integer, null::jsonb
      from flotilla_settle_held(p_owner, p_settle, p_max_deferrals) s;
  end if;
  return query select 'claimed', c.item_id, 'leased', c.batch_id, c.item_key, c.item_position, c.prompt, c.lease_token, c.attempt, c.expected, c.feedback, c.resume, c.generation,
      case when row_number() over (partition by c.batch_id order by c.item_position) = 1
        then (select b.execution_spec from subagent_batches b where b.id = c.batch_id) end
    from flotilla_claim(p_owner, p_run, p_ahead, p_lease_seconds, p_max_batches, cardinality(v_held) = 0) c;
end
$$;
