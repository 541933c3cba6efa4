-- Locks the batch rows of these items in id order, so two transactions that move items of the
-- same batches (and whose counters trigger then updates those rows) can never wait on each other
-- in a cycle.
create or replace function flotilla_lock_batches(p_items uuid[]) returns void language plpgsql as $$
begin
  perform 1 from subagent_batches b
   where b.id in (select i.batch_id from subagent_batch_items i where i.id = any(p_items))
   order by b.id
     for update of b;
end
$$;
