-- Retry: a failed item back to work with fresh attempts, queued when the batch's live window has
-- room, otherwise pending (so the window still bounds live work); a completed or failed batch
-- reopens as running. In the caller's transaction (retryItem holds the batch row lock and has
-- checked the item is failed and the batch not cancelled). Returns the item's new status.
create or replace function flotilla_retry_item(p_batch uuid, p_item uuid) returns text language sql as $$
  update subagent_batches b set status = 'running', finished_at = null, updated_at = now()
   where b.id = p_batch and b.status in ('completed', 'failed');
  update subagent_batch_items it set
    status = case when b.queued_count + b.leased_count + b.running_count < b.max_live_items then 'queued' else 'pending' end,
    attempts = 0, deferrals = 0, available_at = null, error = null, finished_at = null, started_at = null,
    updated_at = now()
  from subagent_batches b
  where b.id = p_batch and it.id = p_item and it.batch_id = p_batch and it.status = 'failed'
  returning it.status;
$$;
