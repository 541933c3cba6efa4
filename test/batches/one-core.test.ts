import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { batchProjectionSchema, itemDetailSchema, itemPageSchema } from "@/lib/api/batches";
import { submissionRefusal } from "@/lib/batch-rules";
import { configSchema } from "@/lib/config";
import { createBatchTools } from "@/server/agent/tools/batch";
import { getItemDetail } from "@/server/batches/item-detail";
import { resolveModel } from "@/server/models/index";
import { putFiles } from "@/server/workspace/files";
import { writeHeartbeat } from "@/server/runtime/heartbeat";
import { call, errorOf, makeThread, makeUser, rowCounts, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";

/**
 * One batch core: every door (JSON, NDJSON, files, batch_task, the dialog's rules) refuses with
 * the same `<field>: <message>` behind its own locator, files batches take a budget from HTTP
 * and from the tool alike, and item previews are cut at the configured
 * result_preview_max_chars (not a fixed 2,000). Real PostgreSQL, real route handlers.
 */

// The web side's configuration, read lazily by the handlers: a preview cap above the old fixed 2,000.
const PREVIEW_CAP = 5_000;
process.env.FLOTILLA__SUBAGENT_BATCHES__RESULT_PREVIEW_MAX_CHARS = String(PREVIEW_CAP);
// A worker process may run another suite next: leave the environment as it was.
afterAll(() => {
  delete process.env.FLOTILLA__SUBAGENT_BATCHES__RESULT_PREVIEW_MAX_CHARS;
});

let tdb: TestDatabase;
let alice: TestUser;
const config = configSchema.parse({ subagent_batches: { result_preview_max_chars: PREVIEW_CAP }, simulator: { latency_ms: 1 } });
let toolCall = 0;

beforeAll(async () => {
  tdb = await setupApiDatabase();
  alice = await makeUser(tdb, "core");
});

afterEach(async () => {
  await tdb.sql`delete from worker_heartbeats`;
});

async function threadWithFiles(paths: string[]): Promise<string> {
  const threadId = await makeThread(tdb, alice);
  const limits = { maxFileBytes: 1024 * 1024, maxThreadBytes: 100 * 1024 * 1024, maxStorageBytes: 1024 * 1024 * 1024 };
  await putFiles(
    tdb.db,
    { userId: alice.userId, threadId, limits },
    paths.map((path) => ({ path, bytes: Buffer.from(path), contentType: "text/plain" })),
  );
  return threadId;
}

/** batch_task as the lead agent would call it (with a live worker's heartbeat). */
async function tool(threadId: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  await writeHeartbeat(tdb.db, { id: "core-worker", capacity: 1, running: 0 });
  const [run] = await tdb.sql<{ id: string }[]>`
    insert into agent_runs (user_id, thread_id, kind, definition, model, status)
    values (${alice.userId}, ${threadId}, 'lead', 'lead', 'simulator', 'running') returning id`;
  const tools = await createBatchTools({
    db: tdb.db,
    config,
    userId: alice.userId,
    threadId,
    runId: run!.id,
    model: resolveModel(config, {}),
    abortSignal: new AbortController().signal,
  });
  return (await tools.batch_task!.execute!(args as never, { toolCallId: `call-${++toolCall}`, messages: [] })) as Record<
    string,
    unknown
  >;
}

async function postJson(threadId: string, body: unknown): Promise<Response> {
  return call("POST", `/api/threads/${threadId}/subagent-batches`, { token: alice.token, json: body });
}

async function postNdjson(threadId: string, lines: string[], query: string): Promise<Response> {
  return call("POST", `/api/threads/${threadId}/subagent-batches?${query}`, {
    token: alice.token,
    body: `${lines.join("\n")}\n`,
    contentType: "application/x-ndjson",
  });
}

const LONG_KEY = "k".repeat(201);
const HUGE = "x".repeat(100_001);

describe("every door refuses with the same <field>: <message> behind its own locator", () => {
  it.each([
    {
      rule: "an item_key over 200 characters",
      item: { item_key: LONG_KEY, prompt: "p" },
      field: "item_key: must be at most 200 characters",
    },
    { rule: "an empty explicit prompt", item: { prompt: "" }, field: "prompt: must not be empty" },
    {
      rule: "a prompt over 100,000 characters",
      item: { prompt: HUGE },
      field: "prompt is 100001 characters; at most 100000 per item",
      itemLevel: true,
    },
  ])("$rule", async ({ item, field, itemLevel }) => {
    const threadId = await makeThread(tdb, alice);
    const before = await rowCounts(tdb);
    const sep = itemLevel ? ": " : ".";
    const ndSep = ": ";

    const json = await postJson(threadId, { submission_key: `j-${toolCall}-${Math.random()}`, items: ["ok", item] });
    expect(json.status).toBe(400);
    expect((await errorOf(json)).message).toBe(`items.1${sep}${field}`);

    // NDJSON: the item is on line 3 (a blank line 2 still counts).
    const nd = await postNdjson(threadId, ['"ok"', "", JSON.stringify(item)], `submission_key=n-${Math.random()}`);
    expect(nd.status).toBe(400);
    expect((await errorOf(nd)).message).toBe(`line 3${ndSep}${field}`);

    // batch_task: the argument's JSON path, as the JSON door.
    const fromTool = await tool(threadId, { items: [{ prompt: "ok" }, item] });
    expect(fromTool).toEqual({ error: `items.1${sep}${field}` });

    // The dialog's pre-send check: the same rule, its items named by number.
    const limits = { maxItems: 5000, maxLiveItems: 1000, maxRunningItems: 64, maxTotalPromptChars: 50_000_000 };
    expect(submissionRefusal({ items: [{ prompt: "ok" }, item], prompt_template: undefined }, limits)).toBe(
      `item 2: ${field}`,
    );
    expect(await rowCounts(tdb)).toEqual(before);
  });

  it("the dialog's pre-send check refuses an expanded prompt total over the configured limit, as the writer does", async () => {
    const limits = { maxItems: 5000, maxLiveItems: 1000, maxRunningItems: 64, maxTotalPromptChars: 1_000 };
    const items = Array.from({ length: 30 }, (_, i) => `value ${i}`);
    const template = `Describe {{item}} ${"x".repeat(40)}`;
    const refusal = submissionRefusal({ items, prompt_template: template }, limits);
    expect(refusal).toMatch(/expanded prompts would total \d+ characters; at most 1000 per batch/);
    expect(submissionRefusal({ items: items.slice(0, 5), prompt_template: template }, limits)).toBeNull();
  });

  it("a files batch names the file whose path cannot key an item", async () => {
    const long = `deep/${"n".repeat(200)}.md`;
    const threadId = await threadWithFiles(["deep/a.md", long]);
    const before = await rowCounts(tdb);
    const res = await postJson(threadId, { submission_key: `f-${Math.random()}`, files: "deep/*", prompt_template: "Read {{file}}" });
    expect(res.status).toBe(400);
    expect((await errorOf(res)).message).toBe(`file ${JSON.stringify(long)}: item_key: must be at most 200 characters`);
    expect(await tool(threadId, { files: "deep/*", prompt_template: "Read {{file}}" })).toEqual({
      error: `file ${JSON.stringify(long)}: item_key: must be at most 200 characters`,
    });
    expect(await rowCounts(tdb)).toEqual(before);
  });

  it("a duplicate key names both items in the door's own terms", async () => {
    const threadId = await makeThread(tdb, alice);
    const items = [{ item_key: "a", prompt: "1" }, "x", { item_key: "a", prompt: "2" }];
    const json = await postJson(threadId, { submission_key: `d-${Math.random()}`, items });
    expect((await errorOf(json)).message).toBe('items.2: duplicate item_key "a" (first used by items.0)');
    const nd = await postNdjson(
      threadId,
      items.map((i) => JSON.stringify(i)),
      `submission_key=d-${Math.random()}`,
    );
    expect((await errorOf(nd)).message).toBe('line 3: duplicate item_key "a" (first used by line 1)');
    expect(await tool(threadId, { items: [{ item_key: "a", prompt: "1" }, { item_key: "a", prompt: "2" }] })).toEqual({
      error: 'items.1: duplicate item_key "a" (first used by items.0)',
    });
  });

  it("top-level fields read the same from JSON, NDJSON query parameters and tool arguments", async () => {
    const threadId = await makeThread(tdb, alice);
    const json = await postJson(threadId, { submission_key: `s-${Math.random()}`, items: ["a"], subagent: "ghost" });
    const nd = await postNdjson(threadId, ['"a"'], `submission_key=s-${Math.random()}&subagent=ghost`);
    const fromTool = await tool(threadId, { items: ["a"], subagent: "ghost" });
    const message = (await errorOf(json)).message;
    expect(message).toMatch(/^subagent: unknown sub-agent "ghost"/);
    expect((await errorOf(nd)).message).toBe(message);
    expect(fromTool).toEqual({ error: message });

    const overBudget = { submission_key: `b-${Math.random()}`, items: ["a"], max_cost_usd: -1 };
    const jsonBudget = await errorOf(await postJson(threadId, overBudget));
    expect(jsonBudget.message).toMatch(/^max_cost_usd: /);
    expect(await tool(threadId, { items: ["a"], max_cost_usd: -1 })).toEqual({ error: expect.stringMatching(/^max_cost_usd: /) });
  });
});

describe("a files batch with max_cost_usd", () => {
  it("is accepted the same from HTTP and from batch_task, with the budget recorded", async () => {
    const threadId = await threadWithFiles(["r/1.md", "r/2.md"]);
    const res = await postJson(threadId, {
      submission_key: "files-budget",
      files: "r/*.md",
      prompt_template: "Read {{file}}",
      max_cost_usd: 0.5,
      max_total_tokens: 10_000,
    });
    expect(res.status).toBe(201);
    const overHttp = batchProjectionSchema.parse(await res.json());
    expect(overHttp).toMatchObject({ total: 2, budget: { max_cost_usd: 0.5, max_total_tokens: 10_000 } });

    const receipt = await tool(threadId, { files: "r/*.md", prompt_template: "Read {{file}}", max_cost_usd: 0.5, max_total_tokens: 10_000 });
    expect(receipt).toMatchObject({ created: true, total: 2 });
    const [row] = await tdb.sql<{ max_cost_usd: number; max_total_tokens: string }[]>`
      select max_cost_usd, max_total_tokens from subagent_batches where id = ${String(receipt.batch_id)}`;
    expect({ cost: row!.max_cost_usd, tokens: Number(row!.max_total_tokens) }).toEqual({ cost: 0.5, tokens: 10_000 });

    // And a bad budget is the same refusal from both.
    const bad = await errorOf(
      await postJson(threadId, { submission_key: "files-bad", files: "r/*.md", prompt_template: "{{file}}", max_cost_usd: 0 }),
    );
    expect(bad.message).toMatch(/^max_cost_usd: /);
    expect(await tool(threadId, { files: "r/*.md", prompt_template: "{{file}}", max_cost_usd: 0 })).toEqual({
      error: expect.stringMatching(/^max_cost_usd: /),
    });
  });
});

describe("result_preview_max_chars is the one preview cap", () => {
  it("item pages and item detail cut previews and errors at the configured value", async () => {
    const threadId = await makeThread(tdb, alice);
    const res = await postJson(threadId, { submission_key: "previews", items: ["a", "b"] });
    const batch = batchProjectionSchema.parse(await res.json());
    // What a worker stores under this configuration: previews of up to PREVIEW_CAP characters.
    await tdb.sql`
      update subagent_batch_items
         set status = 'succeeded', result = repeat('r', 8000), preview = repeat('p', ${PREVIEW_CAP}),
             attempts = 1, started_at = now(), finished_at = now()
       where batch_id = ${batch.id} and position = 1`;
    await tdb.sql`
      update subagent_batch_items
         set status = 'failed', error = repeat('e', 9000), attempts = 1, started_at = now(), finished_at = now()
       where batch_id = ${batch.id} and position = 2`;

    const page = itemPageSchema.parse(
      await (await call("GET", `/api/threads/${threadId}/subagent-batches/${batch.id}/items`, { token: alice.token })).json(),
    );
    expect(page.items[0]!.preview).toHaveLength(PREVIEW_CAP);
    expect(page.items[1]!.error).toHaveLength(PREVIEW_CAP);

    // A smaller configured cap cuts smaller (the same rows, read with 300).
    const detail = itemDetailSchema.parse(
      await getItemDetail(tdb.db, {
        userId: alice.userId,
        threadId,
        batchId: batch.id,
        itemId: page.items[0]!.id,
        previewMaxChars: 300,
      }),
    );
    expect(detail.preview).toHaveLength(300);
  });
});
