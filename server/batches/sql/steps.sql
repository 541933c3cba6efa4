-- Durable steps (issue 26): one completed model step of a batch item, written under the item's
-- lease. The item row is read FOR SHARE, so the write waits for a transition that holds it
-- (settle, recover, cancel) and then sees its outcome: a worker whose lease is gone (expired,
-- handed back, re-claimed, cancelled) writes nothing and is told so (false). A later attempt
-- that resumed from step k writes step k+1 over anything a fenced-out attempt could have left.
-- Transaction-local synchronous_commit = off like every worker transition (README): a lost step
-- is run again under the same idempotency key.
create or replace function flotilla_save_step(
  p_owner text, p_item uuid, p_token bigint, p_step integer, p_messages jsonb, p_tool_calls jsonb
) returns boolean language plpgsql as $$
begin
  perform set_config('synchronous_commit', 'off', true);
  perform 1 from subagent_batch_items it
   where it.id = p_item and it.lease_owner = p_owner and it.lease_token = p_token
     and it.status in ('leased', 'running')
     for share;
  if not found then return false; end if;
  insert into subagent_batch_item_steps (item_id, step, messages, tool_calls, lease_token)
  values (p_item, p_step, p_messages, p_tool_calls, p_token)
  on conflict (item_id, step) do update set
    messages = excluded.messages, tool_calls = excluded.tool_calls, lease_token = excluded.lease_token, created_at = now();
  return true;
end
$$;
