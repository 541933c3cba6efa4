import { batchSubagent } from "@/server/agent/registry";
import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { insertItems } from "@/server/batches/insert-items";
import { submitBatch } from "@/server/batches/submit";
import { AppError } from "@/server/errors";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { counterDrift, makeOwner, SIM_MODEL, testConfig } from "./support";

/** The item write (COPY FROM STDIN in the submission's transaction): exact values, all or nothing, never a hang. */

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

  it("refuses a NUL character naming the item, and writes nothing", async () => {
    const before = await itemCount();
    const err = await submit(["fine", "also fine", "bad\u0000one"]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: "validation_failed", message: expect.stringMatching(/^items\.2: prompt must not contain NUL/) });
    expect(await itemCount()).toBe(before);
    expect((await t.sql`select 1 from subagent_batches where submission_key = ${`ins-${keys}`}`).length).toBe(0);
  });

  it("rejects (never hangs) when PostgreSQL refuses rows after the last chunk, and the transaction writes nothing", async () => {
    const { batch } = await submit(["a", "b"]);
    const before = await itemCount();
    // Positions 1 and 2 exist: the unique position index refuses the copy as it ends.
    const attempt = t.db.transaction((tx) => insertItems(tx, { batchId: batch.id, offset: 0, live: 0, items: [{ key: "x", prompt: "p", input: "p" }] }));
    await expect(attempt).rejects.toMatchObject({ code: "23505" });
    expect(await itemCount()).toBe(before);
    // The connection is usable afterwards.
    expect((await t.db.execute(sql`select 1 as one`))[0]).toEqual({ one: 1 });
  });

  it("rolls the rows back with the caller's transaction", async () => {
    const { batch } = await submit(["a"]);
    const before = await itemCount();
    const failed = t.db.transaction(async (tx) => {
      await insertItems(tx, { batchId: batch.id, offset: 1, live: 0, items: [{ key: "later", prompt: "p", input: "p" }] });
      expect((await tx.execute(sql`select count(*)::int as n from subagent_batch_items where batch_id = ${batch.id}`))[0]).toEqual({ n: 2 });
      throw new Error("caller fails after the write");
    });
    await expect(failed).rejects.toThrow("caller fails after the write");
    expect(await itemCount()).toBe(before);
  });
});
