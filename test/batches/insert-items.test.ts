import { batchSubagent } from "@/server/agent/registry";
import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { INSERT_MAX_ITEMS, type ItemRow, insertItems } from "@/server/batches/insert-items";
import { BATCH_CHANNEL, batchEventPayload } from "@/server/batches/notify";
import { submitBatch } from "@/server/batches/submit";
import { AppError } from "@/server/errors";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { counterDrift, makeOwner, SIM_MODEL, testConfig } from "./support";

/**
 * The item write in the submission's transaction (one INSERT up to INSERT_MAX_ITEMS items, COPY FROM
 * STDIN beyond): exact values, identical rows either way, all or nothing, never a hang.
 */

let t: TestDatabase;
let owner: { userId: string; threadId: string };
const config = testConfig({ subagent_batches: { max_items_per_batch: 5_000, default_max_live_items: 3 } });
let keys = 0;

beforeAll(async () => {
  t = await createTestDatabase();
  owner = await makeOwner(t.db);
});

const submit = (items: Array<string | { item_key?: string; prompt: string }>) =>
  submitBatch(t.db, { ...batchSubagent(config, undefined), ...owner, input: { submission_key: `ins-${++keys}`, items }, config, model: SIM_MODEL });

async function rows(batchId: string) {
  return t.sql<{ position: number; item_key: string; prompt: string; input: string; status: string }[]>`
    select position, item_key, prompt, input, status from subagent_batch_items where batch_id = ${batchId} order by position`;
}

const itemCount = async () => (await t.sql<{ n: number }[]>`select count(*)::int as n from subagent_batch_items`)[0]!.n;

describe("insertItems", () => {
  it("stores every value exactly, whatever COPY's text format would read as special", async () => {
    const tricky = ["tab\there", "new\nline", "cr\rlf\r\n", "back\\slash", "\\N", "\\.", "\\", "\\t literally", "é ✓ 中文 😀 \u2028", "\u0001\u007f"];
    const { batch } = await submit(tricky.map((v, i) => ({ item_key: `k\t${i}\\${v}`, prompt: v })));
    const stored = await rows(batch.id);
    expect(stored).toEqual(
      tricky.map((v, i) => ({ position: i + 1, item_key: `k\t${i}\\${v}`, prompt: v, input: v, status: i < 3 ? "queued" : "pending" })),
    );
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  });

  it("streams thousands of rows in several COPY messages, positions and window intact", async () => {
    const prompt = (i: number) => `Item ${i}: ${"x".repeat(300)}`;
    const { batch } = await submit(Array.from({ length: 5_000 }, (_, i) => prompt(i)));
    const stored = await rows(batch.id);
    expect(stored).toHaveLength(5_000);
    expect(stored.every((r, i) => r.position === i + 1 && r.item_key === `item-${i + 1}` && r.prompt === prompt(i))).toBe(true);
    expect(stored.filter((r) => r.status === "queued").map((r) => r.position)).toEqual([1, 2, 3]);
    expect(batch.pendingCount).toBe(4_997);
  });

  // Item counts that take each path: one INSERT, and COPY.
  const PATHS = [
    ["INSERT", 3],
    ["COPY", INSERT_MAX_ITEMS + 1],
  ] as const;

  it.each(PATHS)("refuses a NUL character naming the item, and writes nothing (%s)", async (_path, n) => {
    const before = await itemCount();
    const items = Array.from({ length: n }, (_, i) => (i === n - 1 ? "bad\u0000one" : `fine ${i}`));
    const err = await submit(items).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: "validation_failed", message: expect.stringMatching(new RegExp(`^items\\.${n - 1}: prompt must not contain NUL`)) });
    expect(await itemCount()).toBe(before);
    expect((await t.sql`select 1 from subagent_batches where submission_key = ${`ins-${keys}`}`).length).toBe(0);
  });

  it("the submit notification goes out with the batch's insert but is delivered only for a batch that committed", async () => {
    // The batch insert, its notification and a small first chunk go out pipelined (submit.ts): a
    // refusal of the chunk after the others were sent rolls all of them back, notification included.
    const heard: string[] = [];
    const listening = await t.sql.listen(BATCH_CHANNEL, (payload) => heard.push(payload));
    try {
      const refused = await submit(["fine", "bad\u0000one"]).catch((e: unknown) => e);
      expect(refused).toMatchObject({ code: "validation_failed", message: expect.stringMatching(/^items\.1: prompt must not contain NUL/) });
      const { batch } = await submit(["one"]);
      await expect.poll(() => heard, { timeout: 5_000 }).toEqual([batchEventPayload("submit", batch.id)]);
      // Nothing more arrives for the refused one.
      await new Promise((r) => setTimeout(r, 200));
      expect(heard).toEqual([batchEventPayload("submit", batch.id)]);
      expect(await rows(batch.id)).toEqual([{ position: 1, item_key: "item-1", prompt: "one", input: "one", status: "queued" }]);
    } finally {
      await listening.unlisten();
    }
  });

  it("a write the database refuses with the commit already sent behind it: the submission rejects with the refusal, nothing is written or heard", async () => {
    // The batch insert, its notification, the items and the commit go out in one write (submit.ts
    // BatchWrite): the refused INSERT aborts the transaction, so PostgreSQL answers the commit
    // with a rollback, and the submission must say so rather than answer with a batch.
    const marker = `refuse-${keys + 1}`;
    await t.sql.unsafe(`
      create or replace function test_refuse_item() returns trigger language plpgsql as $$
      begin
        if new.prompt = '${marker}' then raise exception 'refused by the test trigger' using errcode = '23514'; end if;
        return new;
      end $$;
      create trigger test_refuse_item before insert on subagent_batch_items for each row execute function test_refuse_item();`);
    const heard: string[] = [];
    const listening = await t.sql.listen(BATCH_CHANNEL, (payload) => heard.push(payload));
    try {
      const before = await t.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`;
      const refused = await submit([marker]).catch((e: unknown) => e);
      expect(String((refused as { cause?: unknown }).cause ?? refused)).toMatch(/refused by the test trigger/);
      const after = await t.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`;
      expect(after[0]!.n).toBe(before[0]!.n);
      await new Promise((r) => setTimeout(r, 200));
      expect(heard).toEqual([]);
      // The connection is usable again: the next submission commits.
      const { batch } = await submit(["after the refusal"]);
      expect(await rows(batch.id)).toHaveLength(1);
    } finally {
      await listening.unlisten();
      await t.sql.unsafe("drop trigger test_refuse_item on subagent_batch_items; drop function test_refuse_item()");
    }
  });

  it("writes identical rows through INSERT and COPY: every column, key, position, status and expected", async () => {
    const tricky = ["tab\there", "new\nline", "cr\rlf\r\n", "back\\slash", "\\N", "\\.", "\\", "é ✓ 中文 😀 \u2028", "\u0001\u007f", "", "plain"];
    const expectations: unknown[] = [undefined, null, "text\twith\\escapes", 42, { a: [1, "b\nc"], "ключ": true }, [], false];
    const items: ItemRow[] = Array.from({ length: INSERT_MAX_ITEMS + 1 }, (_, i) => {
      const v = tricky[i % tricky.length]!;
      const expected = expectations[i % expectations.length];
      return { key: `k\t${i}\\${v}`, prompt: `${v} prompt ${i}`, input: v, ...(expected === undefined ? {} : { expected }) };
    });
    const { batch: viaCopy } = await submit(["first"]);
    const { batch: viaInsert } = await submit(["first"]);
    // Offset 1 (position 1 is the submitted item), live 5: positions 2..5 queued, the rest pending.
    await t.db.transaction((tx) => insertItems(tx, { batchId: viaCopy.id, offset: 1, live: 5, items }));
    await t.db.transaction(async (tx) => {
      await insertItems(tx, { batchId: viaInsert.id, offset: 1, live: 5, items: items.slice(0, INSERT_MAX_ITEMS) });
      await insertItems(tx, { batchId: viaInsert.id, offset: 1 + INSERT_MAX_ITEMS, live: 5, items: items.slice(INSERT_MAX_ITEMS) });
    });
    const all = (batchId: string) => t.sql<{ row: Record<string, unknown> }[]>`
      select to_jsonb(i) - 'id' - 'batch_id' - 'updated_at' - 'created_at' as row from subagent_batch_items i where batch_id = ${batchId} order by position`;
    const copied = await all(viaCopy.id);
    const inserted = await all(viaInsert.id);
    expect(copied).toHaveLength(INSERT_MAX_ITEMS + 2);
    expect(inserted).toEqual(copied);
    // And the values are the submitted ones, not merely equal to each other.
    const stored = await t.sql<{ position: number; item_key: string; prompt: string; input: string; status: string; expected: unknown }[]>`
      select position, item_key, prompt, input, status, expected from subagent_batch_items where batch_id = ${viaInsert.id} and position > 1 order by position`;
    expect(stored).toEqual(
      items.map((item, i) => ({
        position: i + 2,
        item_key: item.key,
        prompt: item.prompt,
        input: item.input,
        status: i + 2 <= 5 ? "queued" : "pending",
        expected: item.expected === undefined ? null : item.expected,
      })),
    );
  });

  it.each(PATHS)("gives the rows time-ordered ids (version 7) that grow with position, across writes (%s)", async (_path, n) => {
    const { batch } = await submit(["first"]);
    const items = Array.from({ length: n }, (_, i) => ({ key: `o${i}`, prompt: "p", input: "p" }));
    await t.db.transaction(async (tx) => {
      await insertItems(tx, { batchId: batch.id, offset: 1, live: 0, items });
      await insertItems(tx, { batchId: batch.id, offset: 1 + n, live: 0, items: items.map((x) => ({ ...x, key: `${x.key}b` })) });
    });
    const ids = (await t.sql<{ id: string }[]>`select id::text from subagent_batch_items where batch_id = ${batch.id} order by position`).map((r) => r.id);
    expect(ids).toHaveLength(2 * n + 1);
    expect(ids.every((id) => /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id))).toBe(true);
    expect(ids.every((id, i) => i === 0 || ids[i - 1]! < id)).toBe(true);
    // The milliseconds in front are the write's (within the test's few seconds).
    expect(Math.abs(Number.parseInt(ids[0]!.replace("-", "").slice(0, 12), 16) - Date.now())).toBeLessThan(60_000);
  });

  it.each(PATHS)("rejects (never hangs) when PostgreSQL refuses rows, and the transaction writes nothing (%s)", async (_path, n) => {
    const { batch } = await submit(["a", "b"]);
    const before = await itemCount();
    // Positions 1 and 2 exist: the unique position index refuses the write (for COPY, as it ends).
    const items = Array.from({ length: n }, (_, i) => ({ key: `x${i}`, prompt: "p", input: "p" }));
    const attempt = t.db.transaction((tx) => insertItems(tx, { batchId: batch.id, offset: 0, live: 0, items }));
    await expect(attempt).rejects.toMatchObject({ code: "23505" });
    expect(await itemCount()).toBe(before);
    // The connection is usable afterwards.
    expect((await t.db.execute(sql`select 1 as one`))[0]).toEqual({ one: 1 });
  });

  it.each(PATHS)("rolls the rows back with the caller's transaction (%s)", async (_path, n) => {
    const { batch } = await submit(["a"]);
    const before = await itemCount();
    const items = Array.from({ length: n }, (_, i) => ({ key: `later${i}`, prompt: "p", input: "p" }));
    const failed = t.db.transaction(async (tx) => {
      await insertItems(tx, { batchId: batch.id, offset: 1, live: 0, items });
      expect((await tx.execute(sql`select count(*)::int as n from subagent_batch_items where batch_id = ${batch.id}`))[0]).toEqual({ n: n + 1 });
      throw new Error("caller fails after the write");
    });
    await expect(failed).rejects.toThrow("caller fails after the write");
    expect(await itemCount()).toBe(before);
  });
});
