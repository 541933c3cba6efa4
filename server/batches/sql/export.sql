-- Value writers of the CSV exports (server/http/export.ts): PostgreSQL writes each CSV line itself
-- (results.jsonl's lines are written by the web process: server/http/result-lines.ts).

-- A jsonb value as compact JSON text, as JSON.stringify writes the value read back (no spaces
-- after , and :; jsonb's own key order). jsonb::text puts a space after each, so a scalar is
-- written by it and only objects and arrays are taken apart (about 8 µs for an object of three
-- keys, against 1 µs for jsonb::text).
create or replace function flotilla_json_text(v jsonb) returns text language sql immutable parallel safe as $$
  select case jsonb_typeof(v)
    when 'object' then '{' || coalesce((
      select string_agg(to_json(e.key)::text || ':'
               || case when jsonb_typeof(e.value) in ('object', 'array') then flotilla_json_text(e.value) else e.value::text end, ',')
        from jsonb_each(v) e), '') || '}'
    when 'array' then '[' || coalesce((
      select string_agg(case when jsonb_typeof(e.value) in ('object', 'array') then flotilla_json_text(e.value) else e.value::text end, ','
                        order by e.ord)
        from jsonb_array_elements(v) with ordinality e(value, ord)), '') || ']'
    else v::text
  end
$$;

-- One CSV cell (RFC 4180) of a JSON value, verbatim (results.csv?raw=1): a string's text, an
-- object or array as compact JSON, both quoted; a number or boolean as written; null or absent empty.
create or replace function flotilla_csv_value(v jsonb) returns text language sql immutable parallel safe as $$
  select case jsonb_typeof(v)
    when 'string' then '"' || replace(v #>> '{}', '"', '""') || '"'
    when 'object' then '"' || replace(flotilla_json_text(v), '"', '""') || '"'
    when 'array' then '"' || replace(flotilla_json_text(v), '"', '""') || '"'
    when 'null' then ''
    else coalesce(v::text, '')
  end
$$;

-- Text as jsonb, or null when it is not JSON (an explicit-prompt item among object items).
create or replace function flotilla_jsonb_or_null(t text) returns jsonb language plpgsql immutable parallel safe as $$
begin
  return t::jsonb;
exception when others then
  return null;
end
$$;

-- Whether an object item's input (its fields as compact JSON) is one JSON object: an explicit
-- prompt among object items is text, even one that starts with {. json, not jsonb: it only
-- checks the text (jsonb would refuse a \u0000 escape JSON.stringify writes).
create or replace function flotilla_is_json_object(t text) returns boolean language plpgsql immutable parallel safe as $$
begin
  return left(t, 1) = '{' and json_typeof(t::json) = 'object';
exception when others then
  return false;
end
$$;

-- Every CSV (results.csv, compare.csv, their header rows) is made to be opened in a spreadsheet
-- (OWASP, CSV injection): a cell gets a leading ' so that it is shown as text, never evaluated as
-- a formula, when it starts with a control character (tab, CR, LF, ...), or when its first
-- character past any spaces (a spreadsheet trims them: a space, a no-break or an ideographic
-- space, ...), control and format characters (Unicode Cf, invisible: soft hyphen, zero-width
-- space and joiners, word joiner, bidi marks, BOM, ...) is = + - @ or one a spreadsheet reads as
-- one: the minus sign − (U+2212), the full-width and small forms ＝ ＋ － ＠ ﹦ ﹢ ﹣ ﹫ (read as
-- their ASCII forms in East Asian locales). A cell that only starts with a format character
-- (right-to-left text after its mark) is left alone. This is the one place the rule lives
-- (server/http/export.ts cellSql writes every CSV cell through it). It reads its argument once,
-- so the planner inlines it into the page's query.
create or replace function flotilla_csv_guard(t text) returns text language sql immutable parallel safe as $$
  select case when t ~ '^(?:[\u0001-\u001f\u007f-\u009f]|[\u0001-\u0020\u007f-\u00a0\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u2066-\u206f\u3000\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]*[-=+@\u2212\uff1d\uff0b\uff0d\uff20\ufe62\ufe63\ufe66\ufe6b])'
    then '''' else '' end
$$;

-- flotilla_csv_value with the guard: a string that starts like a formula, and a negative number
-- (then a quoted text cell), get the leading '. An object or array starts with { or [.
create or replace function flotilla_csv_cell(v jsonb) returns text language sql immutable parallel safe as $$
  select case jsonb_typeof(v)
    when 'string' then '"' || flotilla_csv_guard(v #>> '{}') || replace(v #>> '{}', '"', '""') || '"'
    when 'object' then '"' || replace(flotilla_json_text(v), '"', '""') || '"'
    when 'array' then '"' || replace(flotilla_json_text(v), '"', '""') || '"'
    when 'number' then case when left(v::text, 1) = '-' then '"''' || v::text || '"' else v::text end
    when 'null' then ''
    else coalesce(v::text, '')
  end
$$;

-- A number's cell with the guard: a negative one becomes the quoted text '-n.
create or replace function flotilla_csv_guard_number(n text) returns text language sql immutable parallel safe as $$
  select case when left(n, 1) = '-' then '"''' || n || '"' else n end
$$;
