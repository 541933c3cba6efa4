-- Tool calls that wait for a person (issue 26, tools.require_approval). The settle parks an item
-- in awaiting_approval with one tool_approvals row per call (settle.sql); these decide them. An
-- item goes back to queued (claimable, its attempt was refunded when it parked) once none of its
-- calls is pending; the next attempt resumes from the parked attempt's transcript with the
-- decisions (server/batches/approvals.ts). Only rows whose item still waits are decided, so a
-- cancelled batch's leftovers never move. Lock order: the batch rows first (lock-batches.sql).

-- The owner's decision on the pending calls of one batch: all of them, one item's, or one tool's
-- (as the model sees its name). Returns how many calls were decided and how many items re-queued.
create or replace function flotilla_decide_approvals(
  p_user uuid, p_batch uuid, p_item uuid, p_tool text, p_decision text, p_reason text
) returns table (decided integer, requeued integer) language plpgsql as $$
declare
  v_items uuid[];
  v_decided integer;
  v_requeued integer;
begin
  perform 1 from subagent_batches b where b.id = p_batch and b.user_id = p_user for update of b;
  with d as (
    update tool_approvals a set status = p_decision, reason = p_reason, decided_at = now()
      from subagent_batch_items it
     where a.batch_id = p_batch and a.user_id = p_user and a.status = 'pending'
       and (p_item is null or a.item_id = p_item) and (p_tool is null or a.tool_name = p_tool)
       and it.id = a.item_id and it.status = 'awaiting_approval'
    returning a.item_id
  )
  select count(*)::int, array_agg(distinct d.item_id) into v_decided, v_items from d;
  if v_decided = 0 then
    return query select 0, 0;
    return;
  end if;
  v_requeued := flotilla_requeue_decided(v_items);
  return query select v_decided, v_requeued;
end
$$;

-- Items (already locked through their batch) whose calls are all decided go back to queued.
create or replace function flotilla_requeue_decided(p_items uuid[]) returns integer language sql as $$
  with r as (
    update subagent_batch_items it set status = 'queued', available_at = null, error = null, updated_at = now()
     where it.id = any(p_items) and it.status = 'awaiting_approval'
       and not exists (select 1 from tool_approvals a where a.item_id = it.id and a.status = 'pending')
    returning 1
  )
  select count(*)::int from r
$$;

-- The timeout: calls of batch items pending longer than p_timeout_seconds are denied (the model
-- reads the reason) and their items re-queued. Any worker's poll runs it; cheap when nothing
-- waits (the pending partial index).
create or replace function flotilla_expire_approvals(p_timeout_seconds double precision, p_limit integer default 500)
returns integer language plpgsql as $$
declare
  v_ids uuid[];
  v_items uuid[];
begin
  select array_agg(a.id), array_agg(distinct a.item_id) into v_ids, v_items from (
    select a.id, a.item_id from tool_approvals a
     where a.status = 'pending' and a.item_id is not null
       and a.created_at < now() - make_interval(secs => p_timeout_seconds)
     order by a.created_at limit p_limit
  ) a;
  if v_ids is null then return 0; end if;
  perform flotilla_lock_batches(v_items);
  update tool_approvals a
     set status = 'denied', decided_at = now(),
         reason = 'no decision within ' || p_timeout_seconds || ' s (tools.approval_timeout_seconds)'
   where a.id = any(v_ids) and a.status = 'pending';
  return flotilla_requeue_decided(v_items);
end
$$;
