-- The terminal rule: every item finished → completed if any succeeded, else failed; a cancelled
-- (or already finished) batch keeps its status.
create or replace function flotilla_next_batch_status(
  p_status text, p_succeeded bigint, p_failed bigint, p_cancelled bigint, p_total integer
) returns text language sql immutable as $$
  select case
    when p_status in ('queued', 'running', 'paused') and p_succeeded + p_failed + p_cancelled >= p_total
    then case when p_succeeded > 0 then 'completed' else 'failed' end
    else p_status
  end
$$;

-- Per-status counters, token usage (cache reads and writes too) and cost on the batch row move in the same statement as the items
-- (progress reads never scan items). One statement-level trigger, always on, for every writer:
-- worker transitions, cancel, retry and ad-hoc SQL alike. Measured on issue 22 (PostgreSQL 15,
-- 200 updates of 32 rows): 1.16 ms per statement with the trigger, 0.75 ms without, i.e. about
-- 12 µs per moved row; the hand-written copies it replaces saved part of that at the price of
-- four copies of this delta and a session setting to switch the trigger off.
--
-- Verdicts (issue 25): verdict_passed_count / verdict_failed_count move with the rest, and the
-- per-check counts (subagent_batch_check_counts) when an item's `checks` changed: a finished item
-- adds its checks, a retry that clears them takes them away. Only a statement that moved checks
-- touches that table, so batches without checks pay two null comparisons per moved row.
-- Measured on issue 25 (PostgreSQL 15, 200 updates of 32 rows without checks, 9 rounds
-- interleaving this trigger, the one before it and none, on a busy shared machine): medians of
-- 7.9 ms per statement with this trigger, 8.4 ms with the previous one, 6.4 ms without: no cost
-- visible above the noise.
create or replace function flotilla_count_items() returns trigger language plpgsql as $$
declare
  v_checks boolean;
begin
  with d as (
    select n.batch_id,
      count(*) filter (where n.status = 'pending') - count(*) filter (where o.status = 'pending') as pending,
      count(*) filter (where n.status = 'queued') - count(*) filter (where o.status = 'queued') as queued,
      count(*) filter (where n.status = 'leased') - count(*) filter (where o.status = 'leased') as leased,
      count(*) filter (where n.status = 'running') - count(*) filter (where o.status = 'running') as running,
      count(*) filter (where n.status = 'awaiting_approval') - count(*) filter (where o.status = 'awaiting_approval') as awaiting_approval,
      count(*) filter (where n.status = 'succeeded') - count(*) filter (where o.status = 'succeeded') as succeeded,
      count(*) filter (where n.status = 'failed') - count(*) filter (where o.status = 'failed') as failed,
      count(*) filter (where n.status = 'cancelled') - count(*) filter (where o.status = 'cancelled') as cancelled,
      count(*) filter (where n.verdict = 'passed') - count(*) filter (where o.verdict = 'passed') as verdict_passed,
      count(*) filter (where n.verdict = 'failed') - count(*) filter (where o.verdict = 'failed') as verdict_failed,
      coalesce(sum(n.input_tokens - o.input_tokens), 0) as input_tokens,
      coalesce(sum(n.output_tokens - o.output_tokens), 0) as output_tokens,
      coalesce(sum(n.cached_input_tokens - o.cached_input_tokens), 0) as cached_input_tokens,
      coalesce(sum(n.cache_write_tokens - o.cache_write_tokens), 0) as cache_write_tokens,
      coalesce(sum(n.cost_usd - o.cost_usd), 0) as cost_usd,
      bool_or(n.checks is distinct from o.checks) as checks
    from old_items o join new_items n on n.id = o.id
    where n.status is distinct from o.status
       or n.input_tokens <> o.input_tokens
       or n.output_tokens <> o.output_tokens
       or n.cached_input_tokens <> o.cached_input_tokens
       or n.cache_write_tokens <> o.cache_write_tokens
       or n.cost_usd <> o.cost_usd
       or n.verdict is distinct from o.verdict
       or n.checks is distinct from o.checks
    group by n.batch_id
  ),
  u as (
    update subagent_batches b set
      pending_count = b.pending_count + d.pending,
      queued_count = b.queued_count + d.queued,
      leased_count = b.leased_count + d.leased,
      running_count = b.running_count + d.running,
      awaiting_approval_count = b.awaiting_approval_count + d.awaiting_approval,
      succeeded_count = b.succeeded_count + d.succeeded,
      failed_count = b.failed_count + d.failed,
      cancelled_count = b.cancelled_count + d.cancelled,
      verdict_passed_count = b.verdict_passed_count + d.verdict_passed,
      verdict_failed_count = b.verdict_failed_count + d.verdict_failed,
      input_tokens = b.input_tokens + d.input_tokens,
      output_tokens = b.output_tokens + d.output_tokens,
      cached_input_tokens = b.cached_input_tokens + d.cached_input_tokens,
      cache_write_tokens = b.cache_write_tokens + d.cache_write_tokens,
      cost_usd = b.cost_usd + d.cost_usd,
      updated_at = now(),
      status = flotilla_next_batch_status(b.status, b.succeeded_count + d.succeeded, b.failed_count + d.failed,
        b.cancelled_count + d.cancelled, b.total),
      finished_at = case
        when flotilla_next_batch_status(b.status, b.succeeded_count + d.succeeded, b.failed_count + d.failed,
          b.cancelled_count + d.cancelled, b.total) is distinct from b.status then now()
        else b.finished_at end
    from d
    where b.id = d.batch_id
    returning d.checks
  )
  select coalesce(bool_or(u.checks), false) into v_checks from u;
  if v_checks then
    -- After the batch rows above: this transaction holds them, so no other writer of the same
    -- batch's counts can be in between (the lock order of every transition).
    insert into subagent_batch_check_counts as c (batch_id, name, passed, failed)
    select x.batch_id, x.name, sum(x.passed), sum(x.failed)
      from (
        select n.batch_id, e->>'name' as name, x.sign * (e->>'passed')::boolean::int as passed,
               x.sign * (not (e->>'passed')::boolean)::int as failed
          from old_items o join new_items n on n.id = o.id
          cross join lateral (values (1, n.checks), (-1, o.checks)) as x(sign, checks)
          cross join lateral jsonb_array_elements(case when jsonb_typeof(x.checks) = 'array' then x.checks else '[]' end) e
         where n.checks is distinct from o.checks
      ) x
     group by x.batch_id, x.name
    having sum(x.passed) <> 0 or sum(x.failed) <> 0
    on conflict (batch_id, name) do update set passed = c.passed + excluded.passed, failed = c.failed + excluded.failed;
  end if;
  return null;
end
$$;

create or replace trigger subagent_batch_items_counters
  after update on subagent_batch_items
  referencing old table as old_items new table as new_items
  for each statement execute function flotilla_count_items();
