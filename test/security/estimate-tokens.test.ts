import { getEncoding } from "js-tiktoken";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadMessages } from "@/server/chat/messages";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { underHealthProbe } from "../helpers/health-probe";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * Token counting under abuse (issue 46): js-tiktoken's merge is quadratic in an unbroken run of
 * letters, and the estimate ran it on the web process's event loop (one item of 12,000 `a`s
 * held /api/health 17.8 s). Black-box over real sockets and PostgreSQL: an item at the item
 * limit (100,000 characters) in one unbroken run, of letters, CJK or emoji, is estimated in
 * well under a second of work while /api/health keeps answering, and still counted exactly; a
 * chat message whose batch_task carries such an item (the lead's estimate before its approval
 * card) holds nobody either.
 */

const SYSTEM = "You write one line.";
process.env.FLOTILLA__MODELS = JSON.stringify([
  // An OpenAI model id: counted with its tiktoken encoding (o200k_base).
  { name: "gpt", base_url: "http://127.0.0.1:9/v1", model: "gpt-4o-mini", price_per_million_input: 0.15, price_per_million_output: 0.6 },
]);
process.env.FLOTILLA__SUBAGENTS__DEFINITIONS = JSON.stringify([{ name: "writer", description: "Writes one line", system_prompt: SYSTEM, model: "gpt" }]);
process.env.FLOTILLA__SIMULATOR__LATENCY_MS = "5";
// Every lead batch_task asks first: its card carries the estimate.
process.env.FLOTILLA__SUBAGENT_BATCHES__CONFIRM_OVER_USD = "0";
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME", "FLOTILLA__DEFAULT_MODEL"]) delete process.env[k];

const tdb = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let threadId: string;
let seq = 0;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches", "/api/threads/[threadId]/chat", "/api/health"] });
  alice = await makeUser(tdb, "estimates");
  threadId = await makeThread(tdb, alice);
  // batch_task is offered only while a worker is alive.
  await workerAlive(tdb);
});

afterAll(async () => {
  await server?.close();
  for (const k of ["FLOTILLA__MODELS", "FLOTILLA__SUBAGENTS__DEFINITIONS", "FLOTILLA__SIMULATOR__LATENCY_MS", "FLOTILLA__SUBAGENT_BATCHES__CONFIRM_OVER_USD"]) delete process.env[k];
});

const o200k = getEncoding("o200k_base");

function estimate(items: string[]) {
  return send(server, `/api/threads/${threadId}/subagent-batches/estimate`, {
    headers: { authorization: `Bearer ${alice.token}` },
    json: { submission_key: `estimate-${++seq}`, subagent: "writer", items },
    timeoutMs: 120_000,
  });
}

const batches = async () => (await tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`)[0]!.n;

describe("the estimate's token count is bounded whatever the text", () => {
  it("one item of 100,000 unbroken `a`s: estimated exactly in well under a second, /api/health under 1 s meanwhile", async () => {
    // Eight `a`s are one o200k token, as js-tiktoken itself counts a run short enough for it.
    expect(o200k.encode("a".repeat(800)).length).toBe(100);
    const expected = { items: 1, input_tokens: o200k.encode(SYSTEM).length + 12_500, tokens_method: "tiktoken" };
    // The first estimate of the process loads the encoding too (megabytes of ranks), holding nobody either.
    const first = await underHealthProbe(server, () => estimate(["a".repeat(100_000)]));
    console.info(`100,000 a's, the encoding loaded on the way: ${first.ms.toFixed(0)} ms; slowest health ${first.slowestHealthMs.toFixed(0)} ms over ${first.probes}`);
    expect(first.result.status, first.result.body).toBe(200);
    expect(JSON.parse(first.result.body)).toMatchObject(expected);
    expect(first.slowestHealthMs).toBeLessThan(1_000);
    const { result, ms, slowestHealthMs } = await underHealthProbe(server, () => estimate(["a".repeat(100_000)]));
    console.info(`100,000 a's: ${ms.toFixed(0)} ms; slowest health ${slowestHealthMs.toFixed(0)} ms`);
    expect(JSON.parse(result.body)).toMatchObject(expected);
    expect(slowestHealthMs).toBeLessThan(1_000);
    // Before: minutes (12,000 took 17.8 s). Well under a second on an idle machine; room for a loaded one.
    expect(ms).toBeLessThan(2_000);
  });

  it("unbroken runs of CJK, emoji, capitals and spaces at 100,000 characters each: answered within seconds, /api/health under 1 s", async () => {
    const items = ["中".repeat(100_000), "😀".repeat(50_000), "Ab".repeat(50_000), `${" ".repeat(99_999)}x`, " 😀😀😀😀".repeat(11_111)];
    const { result, ms, slowestHealthMs } = await underHealthProbe(server, () => estimate(items));
    console.info(`five hostile 100,000-character items: ${ms.toFixed(0)} ms; slowest health ${slowestHealthMs.toFixed(0)} ms`);
    expect(result.status, result.body).toBe(200);
    const body = JSON.parse(result.body) as { input_tokens: number; tokens_method: string };
    expect(body.tokens_method).toBe("tiktoken");
    // A CJK character and an emoji here are one token each.
    expect(body.input_tokens).toBeGreaterThan(100_000 + 50_000);
    expect(slowestHealthMs).toBeLessThan(1_000);
    expect(ms).toBeLessThan(10_000);
  });

  it("a chat message whose batch_task carries 30,000 unbroken `a`s: the lead's estimate holds nobody, and the approval card shows it", async () => {
    const chatThread = await makeThread(tdb, alice);
    const before = await batches();
    const call = `[[call:batch_task ${JSON.stringify({ subagent: "writer", items: ["a".repeat(30_000)] })}]]`;
    const message = { id: `u-estimate-${++seq}`, role: "user", parts: [{ type: "text", text: call }] };
    const { result, ms, slowestHealthMs } = await underHealthProbe(server, () =>
      send(server, `/api/threads/${chatThread}/chat`, { headers: { authorization: `Bearer ${alice.token}` }, json: { message }, timeoutMs: 120_000 }),
    );
    console.info(`chat with a 30,000-letter batch_task item: ${ms.toFixed(0)} ms; slowest health ${slowestHealthMs.toFixed(0)} ms`);
    expect(result.status, result.body).toBe(200);
    expect(slowestHealthMs).toBeLessThan(1_000);
    // The call waits on its card, which carries the estimate, counted exactly; nothing was submitted.
    const reply = (await loadMessages(tdb.db, { threadId: chatThread })).filter((m) => m.role === "assistant").at(-1)!;
    expect((reply.parts as { type: string }[]).some((p) => p.type === "tool-batch_task"), JSON.stringify(reply.parts)).toBe(true);
    const rows = await tdb.sql<{ detail: unknown }[]>`select detail from tool_approvals where thread_id = ${chatThread}::uuid and tool_name = 'batch_task'`;
    expect(rows).toHaveLength(1);
    expect(rows[0]!.detail).toMatchObject({ items: 1, input_tokens: o200k.encode(SYSTEM).length + 30_000 / 8, tokens_method: "tiktoken" });
    expect(await batches()).toBe(before);
  });
});
