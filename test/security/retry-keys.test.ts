import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IDEMPOTENCY_META_KEY } from "@/server/tools/mcp";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";
import { waitUntil, Workers } from "../loop/support";

/**
 * The idempotency key names the item's run, the step and the call (DESIGN "Durable steps":
 * `<batch_id>:<item_key>:<generation>:<step>:<call>`), over a real socket with a real worker
 * process, the simulator and a recording MCP stdio server: a retried item's write_file writes
 * again (it is no replay of the last run's), and two calls of one step carry distinct keys.
 * A resumed attempt repeating a step under the same keys is test/batches/steps.test.ts.
 */

const dir = mkdtempSync(path.join(tmpdir(), "flotilla-retry-keys-"));
const log = path.join(dir, "calls.jsonl");
const env = {
  FLOTILLA__MCP__SERVERS: JSON.stringify({ rec: { command: process.execPath, args: [path.resolve("test/fixtures/mcp-recorder.mjs"), log] } }),
  FLOTILLA__SUBAGENTS__DEFINITIONS: JSON.stringify([
    { name: "writer", description: "Writes and records.", system_prompt: "Do the steps.", tool_groups: ["workspace", "mcp:rec"] },
  ]),
};
Object.assign(process.env, env);
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
const workers = new Workers();
const tdb = await setupApiDatabase();
workers.use(tdb);
let server: WebServer;
let user: TestUser;
let thread: string;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches"] });
  user = await makeUser(tdb, "keys");
  thread = await makeThread(tdb, user);
  workers.spawn(env);
  await workers.waitAlive(1);
}, 120_000);
afterAll(async () => {
  await server?.close();
});

/** A JSON answer's fields these tests read (a batch's `id` and `status`), or a file's text. */
type Answer = { status: number; body: string | { id?: string; status?: string } };
async function send(method: string, p: string, json?: unknown): Promise<Answer> {
  const res = await fetch(`${server.origin}${p}`, {
    method,
    headers: { authorization: `Bearer ${user.token}`, ...(json === undefined ? {} : { "content-type": "application/json" }) },
    ...(json === undefined ? {} : { body: JSON.stringify(json) }),
  });
  const text = await res.text();
  return { status: res.status, body: res.headers.get("content-type")?.includes("json") ? JSON.parse(text) : text };
}
const batchPath = (id = "") => `/api/threads/${thread}/subagent-batches${id ? `/${id}` : ""}`;

let n = 0;
async function submit(body: Record<string, unknown>): Promise<{ id: string; itemId: string; itemKey: string }> {
  const res = await send("POST", batchPath(), { submission_key: `keys-${++n}`, subagent: "writer", ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  const id = (res.body as { id: string }).id;
  const [item] = await tdb.sql<{ id: string; item_key: string }[]>`select id, item_key from subagent_batch_items where batch_id = ${id}`;
  return { id, itemId: item!.id, itemKey: item!.item_key };
}

/** Waits for the batch to settle (`runs`: its total attempts so far, so a retried batch is not read before it ran). */
async function settled(id: string, runs: number) {
  return waitUntil(
    `batch ${id} to settle after ${runs} attempt(s)`,
    async () => {
      const b = await send("GET", batchPath(id));
      const [a] = await tdb.sql<{ n: number }[]>`
        select count(*)::int as n from subagent_batch_item_attempts where batch_id = ${id}`;
      const body = b.body as { status: string };
      return ["completed", "failed"].includes(body.status) && a!.n >= runs ? body : undefined;
    },
    90_000,
  );
}

const recorded = (): Array<{ args: { note: string }; meta: Record<string, unknown> | null }> =>
  existsSync(log)
    ? readFileSync(log, "utf8")
        .trim()
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l))
    : [];

describe("idempotency keys", () => {
  it("a retry with a corrected input writes again: out/note.txt ends second-version", async () => {
    const template = 'Write it [[tool:write_file {"path":"out/note.txt","content":"{{item}}"}]]';
    const b = await submit({ prompt_template: template, items: ["first-version"] });
    expect((await settled(b.id, 1)).status).toBe("completed");
    expect(await send("GET", `/api/threads/${thread}/files/out/note.txt`)).toMatchObject({ status: 200, body: "first-version" });

    const retry = await send("POST", `${batchPath(b.id)}/items/${b.itemId}/retry`, { input: "second-version" });
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect((await settled(b.id, 2)).status).toBe("completed");
    expect(await send("GET", `/api/threads/${thread}/files/out/note.txt`)).toMatchObject({ status: 200, body: "second-version" });
    // Two runs of the item, one key each: generation 1, then 2; step 1, call 0.
    const keys = await tdb.sql<{ idempotency_key: string }[]>`
      select idempotency_key from workspace_write_keys where thread_id = ${thread} and path = 'out/note.txt' order by created_at`;
    expect(keys.map((k) => k.idempotency_key)).toEqual([`${b.id}:${b.itemKey}:1:1:0`, `${b.id}:${b.itemKey}:2:1:0`]);
  }, 180_000);

  it("two calls of one step carry distinct keys, ending :0 and :1", async () => {
    const before = recorded().length;
    const b = await submit({ items: ['Record both [[call:rec__record {"note":"a"}]] [[call:rec__record {"note":"b"}]]'] });
    expect((await settled(b.id, 1)).status).toBe("completed");
    const calls = recorded().slice(before);
    // The server may see them in either order; each note keeps its place in the step.
    const byNote = Object.fromEntries(calls.map((c) => [c.args.note, c.meta?.[IDEMPOTENCY_META_KEY]]));
    expect(calls).toHaveLength(2);
    expect(byNote).toEqual({ a: `${b.id}:${b.itemKey}:1:1:0`, b: `${b.id}:${b.itemKey}:1:1:1` });
  }, 180_000);
});
