import { and, asc, desc, eq, gt, isNull, lte, or, sql, type SQL } from "drizzle-orm";
import { EXPECTED_MAX_BYTES } from "@/lib/api/batch-data";
import {
  GOLDEN_INCLUDE,
  type GoldenInclude,
  type GoldenItem,
  type GoldenItemInput,
  type GoldenItemPage,
  type GoldenSetAdded,
  type GoldenSetCreated,
  type GoldenSetDetail,
  type GoldenSetRef,
  type GoldenSetRun,
  type GoldenSetSummary,
  type GoldenSource,
} from "@/lib/api/golden-sets";
import { isFieldsItem, isProblem, jsonValueProblem, keyProblem, parseItem, problemText } from "@/lib/batch-rules";
import type { DbOrTx } from "@/server/db/client";
import { inIndexOrder } from "@/server/db/index-order";
import { goldenSetItems, goldenSets, goldenSetVersions } from "@/server/db/schema";
import { storableJson, storableText } from "@/server/db/storable";
import { AppError, notFound } from "@/server/errors";
import { decodeKeyCursor, encodeKeyCursor } from "./cursor";
import { getOwnedBatch, UUID } from "./owned";

/**
 * Golden sets (DESIGN "Reviews that teach"): the answers people decided on, kept by item_key and
 * versioned. A version is written once, in one transaction with the set row locked: the keys it
 * answers anew close their current rows (`replaced_in`) and get new rows (`added_in`), so a
 * version copies nothing and every earlier one reads as it was. From a batch the rows go from
 * subagent_batch_items to golden_set_items in one INSERT ... SELECT, which holds no item in this
 * process however many there are.
 */

type Source = GoldenSource;
type Owned = { userId: string; setId: string };

/** Rows of one version: added at or before it and not replaced by then (examples.ts reads them too). */
export function inVersion(version: number): SQL {
  const g = goldenSetItems;
  return and(lte(g.addedIn, version), or(isNull(g.replacedIn), gt(g.replacedIn, version))) as SQL;
}

/**
 * A golden item's columns as runs and pages read them: fields and expected raw, since drizzle's
 * jsonb mapping would JSON.parse a string answer again ("1" -> 1).
 */
export const goldenItemColumns = {
  itemKey: goldenSetItems.itemKey,
  input: goldenSetItems.input,
  fields: sql<Record<string, unknown> | null>`${goldenSetItems.fields}`,
  expected: sql<unknown>`${goldenSetItems.expected}`,
};

/** How many items a version of a set holds. */
export async function versionSize(db: DbOrTx, setId: string, version: number): Promise<number> {
  const [row] = await db
    .select({ items: goldenSetVersions.items })
    .from(goldenSetVersions)
    .where(and(eq(goldenSetVersions.setId, setId), eq(goldenSetVersions.version, version)));
  return row?.items ?? 0;
}

export async function createGoldenSet(db: DbOrTx, args: { userId: string; name: string } & Source): Promise<GoldenSetCreated> {
  const items = args.items && checkItems(args.items);
  return db.transaction(async (tx) => {
    const [set] = await tx
      .insert(goldenSets)
      .values({ userId: args.userId, name: storableText(args.name) })
      .returning({ id: goldenSets.id, name: goldenSets.name });
    const written = await writeVersion(tx, { userId: args.userId, setId: set!.id, version: 1, before: 0, fromBatch: args.from_batch, items });
    return { id: set!.id, name: set!.name, version: 1, items: written.items };
  });
}

export async function addToGoldenSet(db: DbOrTx, args: Owned & Source): Promise<GoldenSetAdded> {
  const items = args.items && checkItems(args.items);
  return db.transaction(async (tx) => {
    // Adds to one set take turns: each makes the next version from the one before.
    const set = await ownedSet(tx, args, "update");
    const version = set.version + 1;
    const written = await writeVersion(tx, { userId: args.userId, setId: set.id, version, before: set.items, fromBatch: args.from_batch, items });
    return { version, ...written };
  });
}

interface VersionArgs {
  userId: string;
  setId: string;
  version: number;
  /** Items in the version before (0 for the first). */
  before: number;
  fromBatch?: Source["from_batch"];
  items?: CheckedItem[];
}

async function writeVersion(tx: DbOrTx, args: VersionArgs): Promise<{ items: number; added: number; replaced: number }> {
  const source = args.fromBatch ? await batchRows(tx, args, args.fromBatch) : itemRows(args.items!);
  const { replaced, inserted } = await writeRows(tx, args, source);
  if (inserted === 0 && args.fromBatch) {
    const include = new Set(args.fromBatch.include ?? GOLDEN_INCLUDE);
    throw new AppError("validation_failed", `from_batch: the batch has no ${[...include].join(" or ")} items to take (review some first)`);
  }
  const items = args.before - replaced + inserted;
  await tx.insert(goldenSetVersions).values({
    setId: args.setId,
    version: args.version,
    items,
    source: args.fromBatch ? { from: "batch", batch_id: args.fromBatch.batch_id } : { from: "items" },
  });
  await tx.update(goldenSets).set({ version: args.version, items, updatedAt: sql`now()` }).where(eq(goldenSets.id, args.setId));
  return { items, added: inserted - replaced, replaced };
}

/** A SELECT of the version's new rows: item_key, input, fields, expected, source_batch_id, source_item_id, decision. */
type RowsSql = SQL;

/**
 * Writes the version's rows, reading the source once (a review decided meanwhile cannot make the
 * keys closed differ from the keys added). Past version 1 the new rows go in marked
 * `replaced_in = 0` (in no version, and outside the one-current-row index), the keys they answer
 * anew are closed, and then the new rows become current.
 */
async function writeRows(tx: DbOrTx, args: VersionArgs, rows: RowsSql): Promise<{ replaced: number; inserted: number }> {
  const first = args.version === 1;
  const inserted = await tx.execute(sql`
    insert into golden_set_items (set_id, item_key, added_in, replaced_in, input, fields, expected, source_batch_id, source_item_id, decision)
    select ${args.setId}, r.item_key, ${args.version}, ${first ? null : 0}, r.input, r.fields, r.expected, r.source_batch_id, r.source_item_id, r.decision
      from (${rows}) r`);
  if (first) return { replaced: 0, inserted: inserted.count };
  const replaced = await tx.execute(sql`
    update golden_set_items g set replaced_in = ${args.version}
      from golden_set_items n
     where n.set_id = ${args.setId} and n.added_in = ${args.version}
       and g.set_id = ${args.setId} and g.item_key = n.item_key and g.replaced_in is null`);
  await tx.execute(sql`update golden_set_items set replaced_in = null where set_id = ${args.setId} and added_in = ${args.version}`);
  return { replaced: replaced.count, inserted: inserted.count };
}

/**
 * A batch's reviewed items: accepted ones answer with the model's output (its text for an untyped
 * batch), corrected ones (accepted or rejected, with reviewed_output) with the person's; a
 * rejection without a correction, and an accepted item without an answer, give nothing. Rows go
 * from table to table in one INSERT ... SELECT: none passes through this process.
 */
async function batchRows(tx: DbOrTx, args: VersionArgs, source: NonNullable<Source["from_batch"]>): Promise<RowsSql> {
  const batch = await getOwnedBatch(tx, { userId: args.userId, batchId: source.batch_id });
  const typed = ((batch.executionSpec as { input_fields?: string[] }).input_fields ?? []).length > 0;
  const include = new Set<GoldenInclude>(source.include ?? GOLDEN_INCLUDE);
  const taken: SQL[] = [];
  if (include.has("corrected")) taken.push(sql`i.reviewed_output is not null`);
  if (include.has("accepted"))
    taken.push(sql`(i.review_state = 'accepted' and i.reviewed_output is null and coalesce(i.output, to_jsonb(i.result)) is not null)`);
  // The reviewed-items index (batch_id, position where review_state is not null) finds them.
  return sql`
    select i.item_key, ${typed ? sql`null` : sql`i.input`} as input, ${typed ? sql`i.input::jsonb` : sql`null::jsonb`} as fields,
           coalesce(i.reviewed_output, i.output, to_jsonb(i.result)) as expected, i.batch_id as source_batch_id, i.id as source_item_id,
           case when i.reviewed_output is not null then 'corrected' else 'accepted' end as decision
      from subagent_batch_items i
     where i.batch_id = ${batch.id} and i.review_state in ('accepted', 'rejected') and (${sql.join(taken, sql` or `)})`;
}

interface CheckedItem {
  item_key: string;
  input: string | null;
  fields: Record<string, unknown> | null;
  expected: unknown;
}

/** Items given in the body, checked whole before anything is written: 400 naming the first bad one. */
function checkItems(items: GoldenItemInput[]): CheckedItem[] {
  const seen = new Map<string, number>();
  return items.map((item, index) => {
    const fail = (field: string | undefined, message: string): never => {
      throw new AppError("validation_failed", problemText({ item: index, field, message }));
    };
    if ((item.input === undefined) === (item.fields === undefined)) fail(undefined, "give exactly one of input and fields");
    // The same rules as a submission's items: a non-empty string, or up to 64 scalar fields.
    const parsed = parseItem(item.input ?? item.fields, index);
    if (isProblem(parsed)) fail(parsed.field === undefined ? (item.input === undefined ? "fields" : "input") : `fields.${parsed.field}`, parsed.message);
    const key = item.item_key ?? `item-${index + 1}`;
    const keyIssue = keyProblem(key, index);
    if (keyIssue) fail(keyIssue.field, keyIssue.message);
    const first = seen.get(key);
    if (first !== undefined) throw new AppError("validation_failed", problemText({ item: index, field: "item_key", message: `"${key}" is given twice`, firstItem: first }));
    seen.set(key, index);
    if (item.expected === undefined) fail("expected", "is required");
    const issue = jsonValueProblem(item.expected, EXPECTED_MAX_BYTES);
    if (issue) fail("expected", issue);
    const ok = parsed as Exclude<typeof parsed, { message: string }>;
    const fields = item.fields === undefined ? null : typeof ok !== "string" && isFieldsItem(ok) ? ok.fields : item.fields;
    return { item_key: key, input: item.input ?? null, fields, expected: item.expected };
  });
}

/** Items given in the body (checked by checkItems), as one jsonb parameter; each value taken with -> (jsonb_to_recordset would read the JSON string "1" as the number 1). */
function itemRows(items: CheckedItem[]): RowsSql {
  return sql`
    select e ->> 'item_key' as item_key, e ->> 'input' as input, nullif(e -> 'fields', 'null'::jsonb) as fields, e -> 'expected' as expected,
           null::uuid as source_batch_id, null::uuid as source_item_id, null as decision
      from jsonb_array_elements(${storableJson(items)}::jsonb) e`;
}

async function ownedSet(db: DbOrTx, args: Owned, lock?: "update") {
  if (!UUID.test(args.setId)) throw notFound("golden set");
  const query = db
    .select()
    .from(goldenSets)
    .where(and(eq(goldenSets.id, args.setId), eq(goldenSets.userId, args.userId)));
  const [row] = lock ? await query.for(lock) : await query;
  if (!row) throw notFound("golden set");
  return row;
}

/** The caller's sets, the most recently changed first. */
export async function listGoldenSets(db: DbOrTx, userId: string): Promise<GoldenSetSummary[]> {
  const rows = await db.select().from(goldenSets).where(eq(goldenSets.userId, userId)).orderBy(desc(goldenSets.updatedAt), desc(goldenSets.id));
  return rows.map((r) => ({ id: r.id, name: r.name, version: r.version, items: r.items, updated_at: r.updatedAt.toISOString() }));
}

export async function getGoldenSet(db: DbOrTx, args: Owned): Promise<GoldenSetDetail> {
  const set = await ownedSet(db, args);
  const versions = await db.select().from(goldenSetVersions).where(eq(goldenSetVersions.setId, set.id)).orderBy(asc(goldenSetVersions.version));
  return {
    id: set.id,
    name: set.name,
    version: set.version,
    versions: versions.map((v) => ({ version: v.version, items: v.items, source: v.source, created_at: v.createdAt.toISOString() })),
  };
}

export async function deleteGoldenSet(db: DbOrTx, args: Owned): Promise<void> {
  const set = await ownedSet(db, args);
  // Its versions and items go with it (foreign keys on delete cascade).
  await db.delete(goldenSets).where(eq(goldenSets.id, set.id));
}

/** One page of a version's items (the newest without `version`), in item_key order, and the version it read. */
export async function goldenItems(
  db: DbOrTx,
  args: Owned & { version?: number; cursor?: string; limit: number },
): Promise<GoldenItemPage & { version: number }> {
  const set = await ownedSet(db, args);
  const version = args.version ?? set.version;
  if (version > set.version) throw new AppError("validation_failed", `version: this set has versions 1 to ${set.version}`);
  const after = args.cursor === undefined ? undefined : decodeKeyCursor(args.cursor);
  const g = goldenSetItems;
  // In index order: on a large set not yet analyzed, the planner chose a bitmap scan and a sort of
  // every later key for each page (280 ms a page of 100,000 items; server/db/index-order.ts).
  const rows = await inIndexOrder(db, (tx) =>
    tx
    .select({
      ...goldenItemColumns,
      sourceBatchId: g.sourceBatchId,
      sourceItemId: g.sourceItemId,
      decision: g.decision,
    })
    .from(g)
    .where(and(eq(g.setId, set.id), inVersion(version), after === undefined ? undefined : gt(g.itemKey, after)))
    .orderBy(asc(g.itemKey))
    .limit(args.limit + 1),
  );
  const more = rows.length > args.limit;
  const page = more ? rows.slice(0, args.limit) : rows;
  const items: GoldenItem[] = page.map((r) => ({
    item_key: r.itemKey,
    ...(r.input === null ? {} : { input: r.input }),
    ...(r.fields === null ? {} : { fields: r.fields }),
    expected: r.expected,
    ...(r.sourceBatchId && r.sourceItemId && r.decision ? { source: { batch_id: r.sourceBatchId, item_id: r.sourceItemId, decision: r.decision } } : {}),
  }));
  return { items, next_cursor: more ? encodeKeyCursor(page.at(-1)!.itemKey) : null, version };
}

/** What a run against a golden set takes from it: the version read, and its items with their expected answers in item_key order. */
export interface GoldenRunItems {
  run: GoldenSetRun;
  items: { item_key: string; input: string | null; fields: Record<string, unknown> | null; expected: unknown }[];
}

/**
 * The items a run against a golden set gets (a submission, a variant, batch_task): the given
 * version's (the newest without one), refused before any item is read when the version holds
 * more than `maxItems`. An unknown set and another user's read the same (400 naming
 * `golden_set.id`: a submission never learns whether someone else's set exists).
 */
export async function goldenRunItems(db: DbOrTx, args: { userId: string; ref: GoldenSetRef; maxItems: number }): Promise<GoldenRunItems> {
  const set = await ownedSet(db, { userId: args.userId, setId: args.ref.id }).catch((err: unknown) => {
    if (err instanceof AppError && err.code === "not_found") throw new AppError("validation_failed", "golden_set.id: no such golden set");
    throw err;
  });
  const version = args.ref.version ?? set.version;
  if (version > set.version) throw new AppError("validation_failed", `golden_set.version: this set has versions 1 to ${set.version}`);
  const size = await versionSize(db, set.id, version);
  if (size > args.maxItems)
    throw new AppError("validation_failed", `golden_set: version ${version} holds ${size} items; at most ${args.maxItems} items per batch`);
  const g = goldenSetItems;
  const rows = await db
    .select(goldenItemColumns)
    .from(g)
    .where(and(eq(g.setId, set.id), inVersion(version)))
    .orderBy(asc(g.itemKey))
    .limit(args.maxItems + 1);
  return {
    run: { id: set.id, version },
    items: rows.map((r) => ({ item_key: r.itemKey, input: r.input, fields: r.fields, expected: r.expected })),
  };
}
