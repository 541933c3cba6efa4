-- A run row as a jsonb object (column names as agent_runs spells them), read into agent_runs'
-- columns with their defaults, for both writers below. One select, so the planner inlines it
-- where it is joined laterally: the same plan as writing the read out in each writer.
create or replace function flotilla_run_row_of(p_row jsonb)
returns table (id uuid, user_id uuid, thread_id uuid, kind text, definition text, model text, prompt text,
               depth integer, status text, stop_reason text, result text, error text, input_tokens bigint,
               output_tokens bigint, cached_input_tokens bigint, cache_write_tokens bigint, transcript jsonb,
               tool_calls jsonb, tool_call_count integer, owner_instance text, created_at timestamptz,
               started_at timestamptz, finished_at timestamptz)
language sql stable as $$
  select r.id, r.user_id, r.thread_id, r.kind, r.definition, r.model, r.prompt, coalesce(r.depth, 0), r.status,
         r.stop_reason, r.result, r.error, coalesce(r.input_tokens, 0), coalesce(r.output_tokens, 0),
         coalesce(r.cached_input_tokens, 0), coalesce(r.cache_write_tokens, 0), r.transcript,
         r.tool_calls, coalesce(r.tool_call_count, 0), r.owner_instance, r.created_at, r.started_at,
         coalesce(r.finished_at, now())
    from jsonb_to_record(p_row) as r(
      id uuid, user_id uuid, thread_id uuid, kind text, definition text, model text, prompt text, depth integer,
      status text, stop_reason text, result text, error text, input_tokens bigint, output_tokens bigint,
      cached_input_tokens bigint, cache_write_tokens bigint,
      transcript jsonb, tool_calls jsonb, tool_call_count integer, owner_instance text, created_at timestamptz,
      started_at timestamptz, finished_at timestamptz)
$$;

-- The run row of a batch item, written once when it ends (runs.ts insertFinishedRun: rows that
-- end in the same tick share this one statement). One prepared call with asynchronous commit:
-- measured on issue 22, drizzle building a 21-column multi-row insert plus its own
-- begin / set local / commit was ~0.14 ms of worker CPU per item and three extra round trips
-- per tick. Asynchronous commit is safe because the item's settle commits after it: a crash
-- loses a run row only together with its unsettled item, which then runs again.
create or replace function flotilla_insert_finished_runs(p_rows jsonb) returns void language plpgsql as $$
begin
  perform set_config('synchronous_commit', 'off', true);
  insert into agent_runs (id, user_id, thread_id, kind, definition, model, prompt, depth, status, stop_reason,
                          result, error, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens,
                          transcript, tool_calls, tool_call_count,
                          owner_instance, created_at, started_at, finished_at)
  select r.* from jsonb_array_elements(p_rows) e cross join lateral flotilla_run_row_of(e) r;
end
$$;

-- The run rows the worker hands over with its settlements (settle.sql, worker-pass.sql): written
-- in the settle's own transaction, before any batch row is locked (a thread delete locks the
-- thread, then its batches; taking the thread's key lock first keeps the order the same), and
-- whatever the fence then decides, as the executor's own insert would have been. A row whose
-- thread or user was deleted meanwhile is skipped, and a row already written (a round trip that
-- committed but whose answer was lost) is left as it is, so neither can fail the settlements.
create or replace function flotilla_settle_run_rows(p_settle jsonb) returns void language plpgsql as $$
begin
  insert into agent_runs (id, user_id, thread_id, kind, definition, model, prompt, depth, status, stop_reason,
                          result, error, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens,
                          transcript, tool_calls, tool_call_count,
                          owner_instance, created_at, started_at, finished_at)
  select r.*
    from jsonb_array_elements(p_settle) e
    cross join lateral flotilla_run_row_of(e->'run_row') r
   where jsonb_typeof(e->'run_row') = 'object'
     and exists (select 1 from users u where u.id = r.user_id)
     and (r.thread_id is null or exists (select 1 from threads t where t.id = r.thread_id))
  on conflict (id) do nothing;
end
$$;
