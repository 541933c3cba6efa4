import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TOKEN_COUNT_MAX } from "@/lib/api/subagents";
import { batchProjectionSchema, itemPageSchema } from "@/lib/api/batches";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { multipartBody } from "../helpers/multipart";
import { type FakeReply, type RecordedRequest, startFakeOpenAI } from "../helpers/fake-openai";
import { startWebServer, type WebServer } from "../helpers/web-server";
import { waitUntil, Workers } from "../loop/support";

/**
 * Token counts beyond bigint (issue 38), black box: a real socket, a real worker process,
 * PostgreSQL, and a local OpenAI-compatible endpoint that reports absurd usage (1e30 prompt
 * tokens, a negative or fractional completion count). The counts are clamped where usage enters
 * (TOKEN_COUNT_MAX), and the items settle at once, through the sub-agent executor, a judge and
 * the /v1 batch path alike; none waits for its lease to expire.
 */

const fake = await startFakeOpenAI({
  handler: (req: RecordedRequest): FakeReply => {
    const format = req.body?.response_format as { json_schema?: { name?: string } } | undefined;
    if (format?.json_schema) return { type: "text", text: JSON.stringify({ score: 0.9, reason: "fine" }), usage: { prompt_tokens: 1e30, completion_tokens: -5 } };
    return { type: "text", text: "an answer", usage: { prompt_tokens: 1e30, completion_tokens: 1e30 } };
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

describe("a provider reporting token counts beyond bigint", () => {
  it("batch items (answer and judge) settle at once with their counts clamped", async () => {
    const thread = await makeThread(tdb, alice);
    const started = Date.now();
    const made = await send("POST", `/api/threads/${thread}/subagent-batches`, {
      json: { submission_key: "absurd", items: ["one", "two", "three"], checks: [{ name: "ok", type: "judge", rubric: "Any answer." }] },
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const path = `/api/threads/${thread}/subagent-batches/${made.body.id}`;
    const batch = await waitUntil(
      "the batch to settle",
      async () => {
        const b = batchProjectionSchema.parse((await send("GET", path)).body);
        return ["completed", "failed"].includes(b.status) ? b : undefined;
      },
      45_000,
    );
    expect(Date.now() - started).toBeLessThan(45_000);
    expect(batch).toMatchObject({ status: "completed", counts: { succeeded: 3 } });
    const { items } = itemPageSchema.parse((await send("GET", `${path}/items`)).body);
    for (const item of items) {
      expect(item, JSON.stringify(item.checks)).toMatchObject({ status: "succeeded", attempts: 1, verdict: "passed" });
      // The answer's and the judge's input each clamped; the negative count is 0.
      expect(item.usage.input_tokens).toBe(2 * TOKEN_COUNT_MAX);
      expect(item.usage.output_tokens).toBe(TOKEN_COUNT_MAX);
    }
    expect(batch.usage.input_tokens).toBe(6 * TOKEN_COUNT_MAX);
    // Each item and its run settle with a note saying the counts were clamped.
    const notes = await tdb.db.execute<{ item: string; run: string }>(sql`
      select i.stop_reason as item, r.stop_reason as run
        from subagent_batch_items i join agent_runs r on r.id = i.run_id where i.batch_id = ${made.body.id}`);
    expect(notes).toHaveLength(3);
    for (const n of notes) {
      expect(n.item).toMatch(/token counts the provider reported were out of range and are stored clamped/);
      expect(n.run).toBe(n.item);
    }
  }, 90_000);

  it("a /v1 batch's requests settle at once with their counts clamped", async () => {
    const line = (id: string) =>
      JSON.stringify({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model: "worker-model", messages: [{ role: "user", content: id }] } });
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
    expect(done).toMatchObject({ status: "completed", request_counts: { total: 2, completed: 2, failed: 0 } });
    const out = await fetch(`${server.origin}/v1/files/${done.output_file_id}/content`, { headers: { authorization: `Bearer ${alice.token}` } });
    const lines = (await out.text()).trim().split("\n").map((l) => JSON.parse(l));
    for (const l of lines) expect(l.response.body.usage).toMatchObject({ prompt_tokens: TOKEN_COUNT_MAX, completion_tokens: TOKEN_COUNT_MAX });
  }, 90_000);
});
