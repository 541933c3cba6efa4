-- Settle: ends held attempts, many in one statement (the worker batches its completions).
-- Kinds: succeeded; failed (retried while attempts remain and it is retryable, else failed);
-- deferred (rate limited: back to queued after delay_ms, attempt refunded up to p_max_deferrals
-- times); released (hand-back: back to queued at once, attempt refunded — what a worker does for
-- its unfinished rows at shutdown, for a capacity refusal, and for local-queue rows it gives up).
-- Fenced: only rows this worker holds under the same token change; the result lists the items
-- that moved, with their new status. `started_ms` (epoch ms) on a still-leased row: it started and
-- finished since the worker's last round trip, so its running mark and its end travel together
-- and the start time is written here (measured on issue 22: the separate leased → running update
-- was a third of the per-item work of zero-latency items). `run_row`: the attempt's run row, which
-- the executor left for this transaction to write (run-rows.sql). `output`, `checks`, `verdict`
-- (typed results and checks) are written when the item finishes, succeeded or failed for good; a
-- re-queued item has none (the counters trigger moves the verdict and per-check counts with them).
-- `steps` (only on attempts that stored or resumed durable steps, steps.sql): the item's steps
-- live while one execution goes on across attempts (a hand-back, a rate-limit deferral, a lease
-- expiry); an attempt that ends the item or re-runs it from the start drops them. A re-run from
-- the start (outcome `retry`) also advances the item's `generation`, so its tool calls carry new
-- idempotency keys (steps.ts).
-- awaiting_approval (issue 26): a tool call waits for a person; the item parks (no lease, no
-- slot, attempt refunded) with one tool_approvals row per call in `approvals`; approvals.sql
-- decides and re-queues it.
-- `review_state`: an item that finishes for good joins its batch's review queue when the batch's
-- policy wants it (review.sql); a decision already made is kept.
-- `cost_usd`: what the attempt cost, when the executor priced it (each model's tokens at that
-- model's snapshot: a judge on its own model); else its tokens at the batch's price snapshot.
create or replace function flotilla_settle(p_owner text, p_rows jsonb, p_max_deferrals integer)
returns table (item_id uuid, new_status text) language plpgsql as $$
begin
  perform set_config('synchronous_commit', 'off', true);
  perform flotilla_settle_run_rows(p_rows);
  perform flotilla_lock_batches(array(select (e->>'id')::uuid from jsonb_array_elements(p_rows) e));
  return query select * from flotilla_settle_held(p_owner, p_rows, p_max_deferrals);
end
$$;

-- The settle itself, for a caller that already wrote the run rows and holds the batches' locks
-- (worker-pass.sql does both before its marks): measured on issue 44, writing the run rows a
-- second time (each row parsed, its owner looked up, its id found taken) cost PostgreSQL ~8 µs of
-- CPU per item at load 30, a few per cent of a zero-latency item's, plus a lock statement a pass.
create or replace function flotilla_settle_held(p_owner text, p_rows jsonb, p_max_deferrals integer)
returns table (item_id uuid, new_status text) language plpgsql as $$
#variable_conflict use_column
declare
  v_ids uuid[];
  v_status text[];
  v_batch uuid[];
  v_attempt integer[];
  v_outcome text[];
  v_error text[];
  v_run uuid[];
  v_leased timestamptz[];
  v_started timestamptz[];
begin
  with r as (
    select * from jsonb_to_recordset(p_rows) as x(
      id uuid, token bigint, kind text, result text, preview text, error text, model text,
      stop_reason text, input_tokens bigint, output_tokens bigint, cached_input_tokens bigint, cache_write_tokens bigint,
      retryable boolean, delay_ms bigint, run_id uuid,
      started_ms double precision, output jsonb, checks jsonb, verdict text, approvals jsonb, cost_usd double precision)
  ),
  cur as (
    select it.id, it.batch_id, it.attempts, it.deferrals, it.leased_at, it.status as old_status,
           case when it.status = 'running' then it.started_at else to_timestamp(r.started_ms / 1000.0) end as started_at,
           bt.max_attempts, r.kind, r.result, r.preview, r.error, r.model, r.stop_reason, r.output, r.checks, r.verdict,
           coalesce(r.input_tokens, 0) as input_tokens, coalesce(r.output_tokens, 0) as output_tokens,
           coalesce(r.cached_input_tokens, 0) as cached_input_tokens, coalesce(r.cache_write_tokens, 0) as cache_write_tokens,
           coalesce(r.cost_usd, (coalesce(r.input_tokens, 0) * bt.price_input_per_million
             + coalesce(r.output_tokens, 0) * bt.price_output_per_million) / 1e6) as cost_usd,
           coalesce(r.retryable, true) as retryable, coalesce(r.delay_ms, 0) as delay_ms, r.run_id, r.approvals,
           bt.user_id, bt.review_when, bt.review_rate, it.item_key
      from subagent_batch_items it
      join r on r.id = it.id
      join subagent_batches bt on bt.id = it.batch_id
     where it.lease_owner = p_owner and it.lease_token = r.token and it.status in ('leased', 'running')
       for update of it
  ),
  plan as (
    select cur.*,
      (cur.kind in ('released', 'awaiting_approval') or (cur.kind = 'deferred' and cur.deferrals < p_max_deferrals)) as refund,
      case
        when cur.kind = 'succeeded' then 'succeeded'
        when cur.kind = 'awaiting_approval' then 'awaiting_approval'
        when cur.kind = 'released' then 'queued'
        when cur.kind = 'deferred' and cur.deferrals < p_max_deferrals then 'queued'
        when cur.retryable and cur.attempts < cur.max_attempts then 'queued'
        else 'failed'
      end as next_status,
      case
        when cur.kind = 'deferred' and cur.deferrals >= p_max_deferrals then
          coalesce(cur.error, 'rate limited') || ' (deferred ' || cur.deferrals || ' times already, the limit of rate_limits.max_deferrals)'
        else cur.error
      end as final_error
    from cur
  ),
  upd as (
    update subagent_batch_items it set
      status = plan.next_status,
      attempts = case when plan.refund then greatest(it.attempts - 1, 0) else it.attempts end,
      deferrals = case when plan.kind = 'deferred' then it.deferrals + 1 else it.deferrals end,
      generation = case when plan.next_status = 'queued' and plan.kind <> 'released' and not plan.refund
                        then it.generation + 1 else it.generation end,
      available_at = case
        when plan.next_status = 'queued' and plan.delay_ms > 0 then now() + make_interval(secs => plan.delay_ms / 1000.0)
        else null end,
      lease_owner = null,
      lease_expires_at = null,
      result = case when plan.next_status = 'succeeded' then plan.result else it.result end,
      preview = case when plan.next_status = 'succeeded' then plan.preview else it.preview end,
      output = case when plan.next_status in ('succeeded', 'failed') then plan.output end,
      checks = case when plan.next_status in ('succeeded', 'failed') then plan.checks end,
      verdict = case when plan.next_status in ('succeeded', 'failed') then plan.verdict end,
      error = case
        when plan.next_status = 'succeeded' then null
        when plan.kind = 'released' then it.error
        else plan.final_error end,
      model = coalesce(plan.model, it.model),
      stop_reason = coalesce(plan.stop_reason, it.stop_reason),
      input_tokens = it.input_tokens + plan.input_tokens,
      output_tokens = it.output_tokens + plan.output_tokens,
      cached_input_tokens = it.cached_input_tokens + plan.cached_input_tokens,
      cache_write_tokens = it.cache_write_tokens + plan.cache_write_tokens,
      cost_usd = it.cost_usd + plan.cost_usd,
      run_id = coalesce(plan.run_id, it.run_id),
      started_at = coalesce(plan.started_at, it.started_at),
      finished_at = case when plan.next_status in ('succeeded', 'failed') then now() else null end,
      review_state = case when it.review_state is null and plan.review_when is not null
        and flotilla_review_wanted(plan.review_when, plan.review_rate, plan.item_key, plan.next_status, plan.verdict)
        then 'pending' else it.review_state end,
      review_requested_at = case when it.review_state is null and plan.review_when is not null
        and flotilla_review_wanted(plan.review_when, plan.review_rate, plan.item_key, plan.next_status, plan.verdict)
        then now() else it.review_requested_at end,
      updated_at = now()
    from plan where it.id = plan.id
    returning it.id, it.status, plan.batch_id, plan.attempts, plan.run_id, plan.leased_at, plan.approvals, plan.user_id,
      plan.started_at,
      case
        when plan.next_status = 'succeeded' then 'succeeded'
        when plan.kind = 'released' then 'released'
        when plan.kind = 'awaiting_approval' then 'awaiting_approval'
        when plan.refund then 'deferred'
        when plan.next_status = 'queued' then 'retry'
        else 'failed' end as outcome,
      case when plan.next_status = 'succeeded' then null else plan.final_error end as error
  ),
  parked as (
    insert into tool_approvals (user_id, batch_id, item_id, run_id, approval_id, tool_call_id, tool_name, input)
    select upd.user_id, upd.batch_id, upd.id, upd.run_id, a->>'approval_id', a->>'tool_call_id', a->>'tool_name', a->'input'
      from upd cross join lateral jsonb_array_elements(upd.approvals) a
     where upd.status = 'awaiting_approval' and jsonb_typeof(upd.approvals) = 'array'
  )
  select array_agg(upd.id), array_agg(upd.status), array_agg(upd.batch_id), array_agg(upd.attempts),
         array_agg(upd.outcome), array_agg(upd.error), array_agg(upd.run_id), array_agg(upd.leased_at),
         array_agg(upd.started_at)
    into v_ids, v_status, v_batch, v_attempt, v_outcome, v_error, v_run, v_leased, v_started
    from upd;
  if v_ids is null then return; end if;
  perform flotilla_record_attempts(v_ids, v_batch, v_attempt, array_fill(p_owner, array[cardinality(v_ids)]),
    v_outcome, v_error, v_run, v_leased, v_started);
  if jsonb_path_exists(p_rows, '$[*].steps') then
    delete from subagent_batch_item_steps st
     using unnest(v_ids, v_outcome) as m(id, outcome)
     where st.item_id = m.id and m.outcome in ('succeeded', 'failed', 'retry')
       and m.id in (select (e->>'id')::uuid from jsonb_array_elements(p_rows) e where e ? 'steps');
  end if;
  return query select * from unnest(v_ids, v_status);
end
$$;
