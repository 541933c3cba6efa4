-- Extends every given lease this worker still holds, in one statement (leased rows of the local
-- queue as well as running ones). `lost`: leases that are gone (expired, cancelled, re-claimed,
-- finished), whose runs the worker must abort. Rows locked by a concurrent transition are
-- skipped this time (neither renewed nor lost), so renewal never waits.
create or replace function flotilla_renew(
  p_owner text, p_ids uuid[], p_tokens bigint[], p_lease_seconds double precision
) returns table (item_id uuid, renewed boolean, lost boolean) language sql as $$
  with r as (select * from unnest(p_ids, p_tokens) as r(id, token)),
  held as (
    select i.id from subagent_batch_items i join r on r.id = i.id
     where i.lease_owner = p_owner and i.lease_token = r.token
       and i.status in ('leased', 'running') and i.lease_expires_at > now()
  ),
  upd as (
    update subagent_batch_items it set lease_expires_at = now() + make_interval(secs => p_lease_seconds)
     where it.id in (select i.id from subagent_batch_items i where i.id in (select id from held) for update of i skip locked)
    returning it.id
  )
  select r.id, exists (select 1 from upd where upd.id = r.id), not exists (select 1 from held where held.id = r.id)
    from r
$$;
