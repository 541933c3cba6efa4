-- The attempt history: one row per ended attempt (settled, lease expired, cancelled), written
-- once, when the attempt ends, so the hot claim path stays one write. Every transition that ends
-- attempts passes its rows here as parallel arrays (one insert for the whole statement).
create or replace function flotilla_record_attempts(
  p_item uuid[], p_batch uuid[], p_attempt integer[], p_worker text[], p_outcome text[], p_error text[],
  p_run uuid[], p_leased_at timestamptz[], p_started_at timestamptz[]
) returns void language plpgsql as $$
begin
  -- PL/pgSQL keeps the statement's plan for the session (an SQL function is planned per call).
  insert into subagent_batch_item_attempts
    (item_id, batch_id, attempt, worker_id, outcome, error, run_id, leased_at, started_at, finished_at)
  select a.item, a.batch, a.attempt, coalesce(a.worker, 'unknown'), a.outcome, a.error, a.run,
         coalesce(a.leased_at, now()), a.started_at, now()
    from unnest(p_item, p_batch, p_attempt, p_worker, p_outcome, p_error, p_run, p_leased_at, p_started_at)
      as a(item, batch, attempt, worker, outcome, error, run, leased_at, started_at);
end
$$;
