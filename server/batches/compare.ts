import type { CompareChange, ComparePage, ComparePair, CompareSummary } from "@/lib/api/compare";
import { mcnemarExactP, pValueWords } from "@/lib/stats";
import { type DbOrTx, driverOf } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { decodeCursor, encodeCursor } from "./cursor";
import { getBatch, getOwnedBatch, type BatchScopeArgs } from "./owned";
import { DEFAULT_PREVIEW_MAX_CHARS, ITEM_INPUT_MAX_CHARS } from "./repository";
import { type ExecutionSpec, parseExecutionSpec, specColumns } from "./spec";
import { batchTitle } from "./title";
import type { BatchRow } from "./types";

/**
 * Two batches of one owner compared item by item (DESIGN "Judging a batch"). Items match by
 * item_key. An item's outcome is its verdict; in a batch without checks, succeeded passes and
 * failed fails; a cancelled item has none (unjudged); an unfinished one is pending and counts
 * in no column. Every figure is computed in PostgreSQL: nothing holds a batch's items in memory.
 */

export interface CompareArgs extends BatchScopeArgs {
  /** The other batch: any batch of the same owner, whatever its thread. */
  otherId: string;
}

/** The two batches, owner-scoped: a is in the caller's thread, b anywhere of the caller's (404 otherwise). */
export async function comparedBatches(db: DbOrTx, args: CompareArgs): Promise<{ a: BatchRow; b: BatchRow }> {
  const a = await getBatch(db, args);
  const b = await getOwnedBatch(db, { userId: args.userId, batchId: args.otherId });
  return { a, b };
}

// The outcome of an item row aliased `x`, as SQL: passed | failed | none | pending.
const outcome = (x: string) => `case
  when ${x}.status not in ('succeeded', 'failed', 'cancelled') then 'pending'
  when ${x}.verdict is not null then ${x}.verdict
  when ${x}.status = 'succeeded' then 'passed'
  when ${x}.status = 'failed' then 'failed'
  else 'none' end`;

// What changed between a pair (rows aliased a and b, their outcomes oa and ob).
const changeOf = `case
  when oa = 'pending' or ob = 'pending' then 'pending'
  when oa = 'failed' and ob = 'passed' then 'improved'
  when oa = 'passed' and ob = 'failed' then 'regressed'
  when a.output is distinct from b.output or a.result is distinct from b.result or a.verdict is distinct from b.verdict then 'changed'
  else 'same' end`;

const CHANGE_FILTER: Record<CompareChange, string> = {
  improved: "change = 'improved'",
  regressed: "change = 'regressed'",
  changed: "change in ('improved', 'regressed', 'changed')",
  same: "change = 'same'",
  all: "true",
};

const modelOf = (b: BatchRow): string => {
  const name = (b.executionSpec as { model?: { name?: unknown } }).model?.name;
  return typeof name === "string" ? name : "simulator";
};

interface SideRow {
  passed: number;
  failed: number;
  p50: number | null;
}

export async function compareSummary(db: DbOrTx, args: CompareArgs): Promise<CompareSummary> {
  const { a, b } = await comparedBatches(db, args);
  const sql = driverOf(db);
  const names = [...new Set([...specColumns(a).checks, ...specColumns(b).checks])];
  // Each check's change is counted in the same pass as the verdicts, by containment against
  // constant arrays: expanding every item's checks with jsonb_array_elements was estimated at 100
  // rows an item and sorted on disk (4 s against 1 s for the whole pass, measured at 2 x 100,000).
  const checkParams = names.flatMap((name) => [JSON.stringify([{ name, passed: true }]), JSON.stringify([{ name, passed: false }])]);
  const checkCounts = names
    .map((_, k) => {
      const pass = `$${3 + 2 * k}::jsonb`;
      const fail = `$${4 + 2 * k}::jsonb`;
      return `, count(*) filter (where ca @> ${fail} and cb @> ${pass})::int as c${k}_improved
              , count(*) filter (where ca @> ${pass} and cb @> ${fail})::int as c${k}_regressed`;
    })
    .join("");
  // Three independent reads, run at once: the pairs (verdicts and checks), and each side's own figures.
  const [[pairs], sides, perBatch] = await Promise.all([
    sql.unsafe(
      `with x as (select item_key, status, verdict, checks from subagent_batch_items where batch_id = $1),
            y as (select item_key, status, verdict, checks from subagent_batch_items where batch_id = $2),
            p as (select x.item_key is not null as in_a, y.item_key is not null as in_b,
                         ${outcome("x")} as oa, ${outcome("y")} as ob,
                         case when x.status in ('succeeded', 'failed') then x.checks end as ca,
                         case when y.status in ('succeeded', 'failed') then y.checks end as cb
                    from x full join y on x.item_key = y.item_key)
       select count(*) filter (where in_a and in_b)::int as matched,
              count(*) filter (where not in_b)::int as only_a,
              count(*) filter (where not in_a)::int as only_b,
              count(*) filter (where in_a and in_b and (oa = 'pending' or ob = 'pending'))::int as pending,
              count(*) filter (where in_a and in_b and oa = 'passed' and ob = 'passed')::int as both_passed,
              count(*) filter (where in_a and in_b and oa = 'failed' and ob = 'failed')::int as both_failed,
              count(*) filter (where in_a and in_b and oa = 'failed' and ob = 'passed')::int as improved,
              count(*) filter (where in_a and in_b and oa = 'passed' and ob = 'failed')::int as regressed,
              count(*) filter (where in_a and in_b and oa <> 'pending' and ob <> 'pending' and (oa = 'none' or ob = 'none'))::int as unjudged
              ${checkCounts}
         from p`,
      [a.id, b.id, ...checkParams],
    ),
    Promise.all(
      [a.id, b.id].map(async (id) => {
        const [row] = await sql.unsafe<SideRow[]>(
          `select count(*) filter (where o = 'passed')::int as passed,
                  count(*) filter (where o = 'failed')::int as failed,
                  percentile_cont(0.5) within group (order by ms) as p50
             from (select ${outcome("x")} as o,
                          extract(epoch from (x.finished_at - x.started_at)) * 1000 as ms
                     from subagent_batch_items x where x.batch_id = $1) s`,
          [id],
        );
        return row!;
      }),
    ),
    // Each batch's own pass and fail counts per check, kept by the counters trigger.
    sql<{ batch_id: string; name: string; passed: number; failed: number }[]>`
      select batch_id, name, passed, failed from subagent_batch_check_counts where batch_id in (${a.id}, ${b.id})`,
  ]);
  const p = pairs as unknown as Record<string, number>;
  const [sa, sb] = sides as [SideRow, SideRow];
  const p_value = mcnemarExactP(p.improved!, p.regressed!);
  const side = (batch: BatchRow, s: SideRow) => ({
    id: batch.id,
    title: batchTitle(batch),
    model: modelOf(batch),
    status: batch.status,
    pass_rate: s.passed + s.failed === 0 ? null : s.passed / (s.passed + s.failed),
  });
  const p50 = (s: SideRow) => (s.p50 === null ? null : Math.round(Number(s.p50)));
  return {
    a: side(a, sa),
    b: side(b, sb),
    items: { matched: p.matched!, only_a: p.only_a!, only_b: p.only_b! },
    pending: p.pending!,
    verdicts: {
      both_passed: p.both_passed!,
      both_failed: p.both_failed!,
      improved: p.improved!,
      regressed: p.regressed!,
      unjudged: p.unjudged!,
    },
    p_value,
    p_value_words: pValueWords(p_value, p.improved!, p.regressed!),
    checks: names.map((name, k) => {
      const own = (id: string) => {
        const row = perBatch.find((r) => r.batch_id === id && r.name === name);
        return { passed: row?.passed ?? 0, failed: row?.failed ?? 0 };
      };
      return { name, a: own(a.id), b: own(b.id), improved: p[`c${k}_improved`]!, regressed: p[`c${k}_regressed`]! };
    }),
    cost_usd: { a: a.costUsd, b: b.costUsd },
    tokens: {
      a: { input: Number(a.inputTokens), output: Number(a.outputTokens) },
      b: { input: Number(b.inputTokens), output: Number(b.outputTokens) },
    },
    duration_ms_p50: { a: p50(sa), b: p50(sb) },
    differences: settingDifferences(a, b),
  };
}

/** The settings of b that differ from a's, each side as text (null: none), in the order a person reads them. */
function settingDifferences(a: BatchRow, b: BatchRow): CompareSummary["differences"] {
  const settings = (batch: BatchRow): Array<[CompareSummary["differences"][number]["setting"], string | null]> => {
    const spec = parseExecutionSpec(batch.executionSpec);
    const json = (v: unknown) => (v === null || v === undefined ? null : JSON.stringify(v, null, 2));
    return [
      ["prompt_template", spec.prompt_template],
      ["model", modelOf(batch)],
      ["subagent", batch.subagent],
      ["output_schema", json(spec.output_schema)],
      ["checks", spec.checks.length ? json(spec.checks) : null],
      // Two runs on one set differ in nothing here; on two versions (or sets) the person should know.
      ["golden_set", spec.golden_set ? `${spec.golden_set.id} version ${spec.golden_set.version}` : null],
      ["lane", spec.lane],
      ["examples", examplesSetting(spec)],
    ];
  };
  const sb = settings(b);
  return settings(a).flatMap(([setting, va], k) => (va === sb[k]![1] ? [] : [{ setting, a: va, b: sb[k]![1] }]));
}

/** A batch's examples as a comparison shows them: how many, from which set and version (null: none). */
function examplesSetting(spec: ExecutionSpec): string | null {
  const e = spec.examples;
  return e ? `${e.count} example${e.count === 1 ? "" : "s"} from golden set ${JSON.stringify(e.name)} (${e.golden_set}), version ${e.version}` : null;
}

export const COMPARE_PAGE_DEFAULT = 50;
export const COMPARE_PAGE_MAX = 200;

/** What a pair shows of side `x`'s answer: the typed output when short, else the text answer cut to the preview. */
export const shownOutput = (x: "a" | "b", previewMaxChars: number) =>
  `case when ${x}.output is not null and length(${x}.output::text) <= ${Math.ceil(previewMaxChars * 1.5) + 2}
       then ${x}.output
       else to_jsonb(left(coalesce(${x}.preview, ${x}.result), ${previewMaxChars})) end`;

const sideColumns = (x: "a" | "b", previewMaxChars: number) => `
  ${x}.id as ${x}_id, ${x}.status as ${x}_status, ${x}.verdict as ${x}_verdict,
  coalesce(${x}.checks, '[]'::jsonb) as ${x}_checks, ${x}.cost_usd as ${x}_cost_usd,
  (extract(epoch from (${x}.finished_at - ${x}.started_at)) * 1000)::float8 as ${x}_ms,
  ${shownOutput(x, previewMaxChars)} as ${x}_output`;

/**
 * One page of matched pairs as SQL, in a's position order, of one kind of change: batch $1's
 * items after position $2, at most $3, each with the item of the same key in the batch of
 * `otherParam` (a placeholder), `select` reading the rows aliased a and b and `change`. a is
 * walked by its position index and b's item looked up by its key index (the lateral subquery's
 * limit keeps the planner from hashing all of b instead: keys are unique per batch), so a page
 * costs the rows it walks whatever b's size.
 */
export function pairPageSql(select: string, change: CompareChange, otherParam: string): string {
  return `select ${select}
    from subagent_batch_items a
    cross join lateral (select * from subagent_batch_items i where i.batch_id = ${otherParam} and i.item_key = a.item_key limit 1) b
    cross join lateral (select ${outcome("a")} as oa, ${outcome("b")} as ob) o
    cross join lateral (select ${changeOf} as change) c
   where a.batch_id = $1 and a.position > $2 and ${CHANGE_FILTER[change]}
   order by a.position
   limit $3`;
}

type PairRow = Record<string, unknown> & { position: number };

function toPair(r: PairRow): ComparePair {
  const side = (x: "a" | "b") => ({
    item_id: r[`${x}_id`] as string,
    status: r[`${x}_status`] as ComparePair["a"]["status"],
    output: r[`${x}_output`] ?? null,
    verdict: (r[`${x}_verdict`] as ComparePair["a"]["verdict"]) ?? null,
    checks: r[`${x}_checks`] as ComparePair["a"]["checks"],
    cost_usd: Number(r[`${x}_cost_usd`]),
    duration_ms: r[`${x}_ms`] === null ? null : Math.round(Number(r[`${x}_ms`])),
  });
  return {
    item_key: r.item_key as string,
    input: r.input as string,
    ...(r.expected === null || r.expected === undefined ? {} : { expected: r.expected }),
    change: r.change as ComparePair["change"],
    a: side("a"),
    b: side("b"),
  };
}

/** One keyset page of matched pairs in a's position order, of one kind of change (pairPageSql). */
export async function comparePairs(
  db: DbOrTx,
  args: CompareArgs & { change?: CompareChange; cursor?: string | null; limit?: number; previewMaxChars?: number },
): Promise<ComparePage & { lastPosition: number | null }> {
  const limit = args.limit ?? COMPARE_PAGE_DEFAULT;
  if (!Number.isInteger(limit) || limit < 1 || limit > COMPARE_PAGE_MAX)
    throw new AppError("validation_failed", `limit: must be a whole number between 1 and ${COMPARE_PAGE_MAX}`);
  const after = args.cursor ? decodeCursor(args.cursor) : -1;
  const { a, b } = await comparedBatches(db, args);
  const preview = args.previewMaxChars ?? DEFAULT_PREVIEW_MAX_CHARS;
  const select = `c.change, a.position, a.item_key, left(a.input, ${ITEM_INPUT_MAX_CHARS}) as input, a.expected,
                  ${sideColumns("a", preview)}, ${sideColumns("b", preview)}`;
  const rows = await driverOf(db).unsafe<PairRow[]>(pairPageSql(select, args.change ?? "all", "$4"), [a.id, after, limit + 1, b.id]);
  const more = rows.length > limit;
  const page = more ? rows.slice(0, limit) : rows;
  const last = page.length > 0 ? page[page.length - 1]!.position : null;
  return { items: page.map(toPair), next_cursor: more && last !== null ? encodeCursor(last) : null, lastPosition: last };
}
