-- leased → running when a local slot really starts an item that waited in the worker's local
-- queue or straight from the claim. Fenced: only rows this worker still holds under the same
-- token, unexpired. A held lease still starts while its batch is paused (a pause stops claims;
-- leased rows already count toward the running limit). Returns the ids that moved; any other
-- item must not run.
create or replace function flotilla_mark_running(
  p_owner text, p_ids uuid[], p_tokens bigint[], p_lease_seconds double precision
) returns table (item_id uuid) language plpgsql as $$
#variable_conflict use_column
begin
  perform set_config('synchronous_commit', 'off', true);
  perform flotilla_lock_batches(p_ids);
  return query
  update subagent_batch_items it set
    status = 'running',
    started_at = now(),
    lease_expires_at = now() + make_interval(secs => p_lease_seconds),
    updated_at = now()
  from unnest(p_ids, p_tokens) as r(id, token)
  where it.id = r.id and it.lease_token = r.token and it.lease_owner = p_owner
    and it.status = 'leased' and it.lease_expires_at > now()
  returning it.id;
end
$$;
