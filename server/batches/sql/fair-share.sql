-- Water-filling: `p_total` units spread as evenly as possible over slots with room `p_caps`
-- (equal shares, leftovers to those with more room). Returns one allocation per slot.
create or replace function flotilla_water_fill(p_caps integer[], p_total integer)
returns integer[] language plpgsql immutable as $$
declare
  v_n integer := coalesce(cardinality(p_caps), 0);
  v_alloc integer[];
  v_left integer := greatest(coalesce(p_total, 0), 0);
  v_open integer;
  v_share integer;
  v_give integer;
begin
  if v_n = 0 then return '{}'; end if;
  v_alloc := array_fill(0, array[v_n]);
  loop
    select count(*) into v_open from generate_subscripts(p_caps, 1) g where p_caps[g] > v_alloc[g];
    exit when v_left <= 0 or v_open = 0;
    v_share := greatest(1, ceil(v_left::numeric / v_open)::integer);
    for i in 1..v_n loop
      v_give := least(v_share, p_caps[i] - v_alloc[i], v_left);
      if v_give > 0 then
        v_alloc[i] := v_alloc[i] + v_give;
        v_left := v_left - v_give;
      end if;
    end loop;
  end loop;
  return v_alloc;
end
$$;

-- Fair share in two levels (issue 16): `p_total` is water-filled across users first (a user's
-- room is the sum of their batches' room), then each user's share across that user's batches,
-- so one user's many large batches never starve another user's small one. Users are served in
-- the order of their first batch in the arrays.
create or replace function flotilla_fair_share(p_users uuid[], p_caps integer[], p_total integer)
returns integer[] language plpgsql immutable as $$
declare
  v_alloc integer[] := array_fill(0, array[coalesce(cardinality(p_caps), 0)]);
  v_user_list uuid[];
  v_user_caps integer[];
  v_user_alloc integer[];
  v_members integer[];
  v_member_alloc integer[];
begin
  if coalesce(cardinality(p_caps), 0) = 0 then return '{}'; end if;
  select array_agg(u.user_id order by u.first), array_agg(u.cap order by u.first)
    into v_user_list, v_user_caps
    from (select x.user_id, min(x.i) as first, sum(x.cap)::integer as cap
            from unnest(p_users, p_caps) with ordinality as x(user_id, cap, i)
           group by x.user_id) u;
  v_user_alloc := flotilla_water_fill(v_user_caps, p_total);
  for u in 1..cardinality(v_user_list) loop
    select array_agg(g order by g) into v_members from generate_subscripts(p_users, 1) g where p_users[g] = v_user_list[u];
    v_member_alloc := flotilla_water_fill(array(select p_caps[m] from unnest(v_members) with ordinality as x(m, k) order by k), v_user_alloc[u]);
    for k in 1..cardinality(v_members) loop
      v_alloc[v_members[k]] := v_member_alloc[k];
    end loop;
  end loop;
  return v_alloc;
end
$$;
