-- Whether a finished item joins the review queue, by its batch's policy (the submission's
-- `review`): every item, the failed ones (failed for good, or a failed verdict), or a
-- deterministic sample by item_key at `rate` (the same items whichever worker settles them, and
-- the same in a variant over the same keys).
create or replace function flotilla_review_wanted(p_when text, p_rate double precision, p_key text, p_status text, p_verdict text)
returns boolean language sql immutable as $$
  select p_status in ('succeeded', 'failed') and case p_when
    when 'all' then true
    when 'failed' then p_status = 'failed' or p_verdict = 'failed'
    when 'sample' then ('x' || substr(md5(p_key), 1, 8))::bit(32)::bigint / 4294967296.0 < coalesce(p_rate, 0)
    else false end
$$;
