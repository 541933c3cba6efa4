import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { INVALID_USAGE_ERROR } from "@/lib/api/subagents";
import { batchProjectionSchema, itemPageSchema } from "@/lib/api/batches";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { multipartBody } from "../helpers/multipart";
import { type FakeReply, type RecordedRequest, startFakeOpenAI } from "../helpers/fake-openai";
import { startWebServer, type WebServer } from "../helpers/web-server";
import { waitUntil, Workers } from "../loop/support";

/**
 * Token counts a provider reports absurdly (issues 38 and 46), black box: a real socket, a real
 * worker process, PostgreSQL, and a local OpenAI-compatible endpoint that reports 1e30 prompt
 * tokens, 9e11 (under the old storage clamp), or a negative completion count. Such an answer is
 * refused (`invalid_usage`, not retried) and its counts are not billed: they used to be clamped
 * to 1e12 and counted, so one item spent a batch's budget at once. The items settle at once,
 * through the sub-agent executor, a judge and the /v1 batch path alike.
 */

const fake = await startFakeOpenAI({
  handler: (req: RecordedRequest): FakeReply => {
    const format = req.body?.response_format as { json_schema?: { name?: string } } | undefined;
    if (format?.json_schema) return { type: "text", text: JSON.stringify({ score: 0.9, reason: "fine" }), usage: { prompt_tokens: 1e30, completion_tokens: -5 } };
    const asked = JSON.stringify(req.body?.messages ?? []);
    if (asked.includes("absurd")) return { type: "text", text: "an answer", usage: { prompt_tokens: 1e30, completion_tokens: 1e30 } };
    if (asked.includes("huge")) return { type: "text", text: "an answer", usage: { prompt_tokens: 9e11, completion_tokens: 10 } };
    return { type: "text", text: "an answer", usage: { prompt_tokens: 10, completion_tokens: 5 } };
  },
});
const models = [{ name: "worker-model", base_url: fake.url, model: "item-1", price_per_million_input: 2, price_per_million_output: 10 }];
// A long lease: an item that waited for its expiry would not settle within the test's bound.
const env = { FLOTILLA__MODELS: JSON.stringify(models), FLOTILLA__DEFAULT_MODEL: "worker-model", FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: "600" };
Object.assign(process.env, env);
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
const workers = new Workers();
const tdb = await setupApiDatabase();
workers.use(tdb);
let server: WebServer;
let alice: TestUser;

beforeAll(async () => {
  server = await startWebServer();
  alice = await makeUser(tdb, "absurd-usage");
  workers.spawn(env);
  await workers.waitAlive(1);
}, 120_000);
afterAll(async () => {
  await server?.close();
  await fake.close();
});

async function send(method: string, path: string, init: { json?: unknown; body?: Buffer; type?: string } = {}) {
  const res = await fetch(`${server.origin}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${alice.token}`,
      ...(init.json !== undefined ? { "content-type": "application/json" } : init.type ? { "content-type": init.type } : {}),
    },
    ...(init.json !== undefined ? { body: JSON.stringify(init.json) } : init.body ? { body: new Uint8Array(init.body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe("a provider reporting absurd token counts", () => {
  it("batch items: such an answer fails with invalid_usage and bills nothing, so the budget is not spent; a judge's such verdict is refused", async () => {
    const thread = await makeThread(tdb, alice);
    const started = Date.now();
    const made = await send("POST", `/api/threads/${thread}/subagent-batches`, {
      json: {
        submission_key: "absurd",
        items: [
          { item_key: "absurd", prompt: "absurd one" },
          { item_key: "huge", prompt: "huge two" },
          { item_key: "fine", prompt: "fine three" },
        ],
        checks: [{ name: "ok", type: "judge", rubric: "Any answer." }],
        // One item billed at a clamped 1e12 tokens ($2,000,000 at $2 a million) spent this at once.
        max_cost_usd: 1,
        max_running_items: 1,
      },
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const path = `/api/threads/${thread}/subagent-batches/${made.body.id}`;
    const batch = await waitUntil(
      "the batch to settle",
      async () => {
        const b = batchProjectionSchema.parse((await send("GET", path)).body);
        return ["completed", "failed", "paused"].includes(b.status) ? b : undefined;
      },
      45_000,
    );
    expect(Date.now() - started).toBeLessThan(45_000);
    expect(batch).toMatchObject({ status: "completed", pause_reason: null, counts: { succeeded: 1, failed: 2 } });
    const { items } = itemPageSchema.parse((await send("GET", `${path}/items`)).body);
    const byKey = new Map(items.map((i) => [i.item_key, i]));
    // Refused, not retried; a count out of range is not counted, one in range (huge's 10 completion tokens) is.
    expect(byKey.get("absurd")).toMatchObject({ status: "failed", attempts: 1, error: INVALID_USAGE_ERROR, usage: { input_tokens: 0, output_tokens: 0 } });
    expect(byKey.get("huge")).toMatchObject({ status: "failed", attempts: 1, error: INVALID_USAGE_ERROR, usage: { input_tokens: 0, output_tokens: 10 } });
    // The answer counts; its judge's absurd counts do not, and its verdict is refused.
    expect(byKey.get("fine")).toMatchObject({ status: "succeeded", verdict: "failed", usage: { input_tokens: 10, output_tokens: 5 } });
    expect(byKey.get("fine")!.checks).toEqual([{ name: "ok", passed: false, reason: `judge error: ${INVALID_USAGE_ERROR}` }]);
    expect(batch.usage).toMatchObject({ input_tokens: 10, output_tokens: 15 });
    expect(batch.cost_usd).toBeLessThan(0.01);
    const notes = await tdb.db.execute<{ key: string; item: string; run: string }>(sql`
      select i.item_key as key, i.stop_reason as item, r.stop_reason as run
        from subagent_batch_items i join agent_runs r on r.id = i.run_id where i.batch_id = ${made.body.id} and i.status = 'failed'`);
    expect(notes).toHaveLength(2);
    for (const n of notes) expect(n, n.key).toMatchObject({ item: "invalid_usage", run: "invalid_usage" });
  }, 90_000);

  it("a /v1 batch's requests with such counts settle at once, failed with invalid_usage", async () => {
    const line = (id: string) =>
      JSON.stringify({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model: "worker-model", messages: [{ role: "user", content: `absurd ${id}` }] } });
    const { body, contentType } = multipartBody([
      { filename: "absurd.jsonl", content: `${line("a")}\n${line("b")}\n`, type: "application/jsonl" },
      { name: "purpose", content: "batch" },
    ]);
    const file = await send("POST", "/v1/files", { body, type: contentType });
    expect(file.status, JSON.stringify(file.body)).toBe(200);
    const made = await send("POST", "/v1/batches", { json: { input_file_id: file.body.id, endpoint: "/v1/chat/completions", completion_window: "24h" } });
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    const done = await waitUntil(
      "the /v1 batch to settle",
      async () => {
        const b = (await send("GET", `/v1/batches/${made.body.id}`)).body;
        return ["completed", "failed", "expired", "cancelled"].includes(String(b.status)) ? b : undefined;
      },
      45_000,
    );
    expect(done).toMatchObject({ status: "completed", request_counts: { total: 2, completed: 0, failed: 2 } });
    const out = await fetch(`${server.origin}/v1/files/${done.error_file_id}/content`, { headers: { authorization: `Bearer ${alice.token}` } });
    const lines = (await out.text()).trim().split("\n");
    expect(lines).toHaveLength(2);
    for (const l of lines) expect(l).toContain("invalid_usage: the provider reported token counts out of range");
  }, 90_000);
});
