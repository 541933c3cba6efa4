import type { ChildProcess } from "node:child_process";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BatchProjection, batchListSchema, batchProjectionSchema, itemPageSchema } from "@/lib/api/batches";
import { spawnWorker, stopWorker, until } from "../compat/support";
import type { TestDatabase } from "../helpers/db";
import { send, startWebServer, type WebServer } from "../helpers/web-server";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "./helpers";

/**
 * /mcp through the official MCP client SDK (Streamable HTTP) against the real route behind the
 * front door, real PostgreSQL and a real worker process running the items on the simulator.
 * Every answer is compared with what the HTTP API says for the same question.
 */

// Read lazily by the handlers: a small queue, so a quota refusal is cheap to reach.
process.env.FLOTILLA__QUOTAS__MAX_QUEUED_ITEMS = "40";

let tdb: TestDatabase;
let server: WebServer;
let worker: ChildProcess | undefined;
let alice: TestUser;
let bob: TestUser;
const clients: Client[] = [];

async function connect(token: string | undefined): Promise<Client> {
  const client = new Client({ name: "flotilla-test", version: "1.0.0" });
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  await client.connect(new StreamableHTTPClientTransport(new URL(`${server.origin}/mcp`), { requestInit: { headers } }));
  clients.push(client);
  return client;
}

/** A tool's answer: its structured JSON, checked to be the same JSON as its one text block. */
async function ok(client: Client, name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
  if (result.isError) throw new Error(`${name} refused: ${JSON.stringify(result.content)}`);
  expect(result.content).toHaveLength(1);
  const [block] = result.content;
  expect(block?.type).toBe("text");
  expect(JSON.parse((block as { text: string }).text)).toEqual(result.structuredContent);
  return result.structuredContent!;
}

/** A refusal: a tool error whose one text block is the message. */
async function refused(client: Client, name: string, args: Record<string, unknown>): Promise<string> {
  const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
  expect(result.isError).toBe(true);
  expect(result.structuredContent).toBeUndefined();
  return (result.content[0] as { text: string }).text;
}

async function api(user: TestUser, path: string, body?: unknown) {
  const res = await send(server, path, { headers: { authorization: `Bearer ${user.token}` }, json: body });
  return { status: res.status, body: JSON.parse(res.body) as Record<string, unknown> };
}

const batchPath = (b: BatchProjection) => `/api/threads/${b.thread_id}/subagent-batches/${b.id}`;

async function counts(userId: string) {
  const [row] = await tdb.sql<{ threads: number; batches: number }[]>`
    select (select count(*)::int from threads where user_id = ${userId}) as threads,
           (select count(*)::int from subagent_batches where user_id = ${userId}) as batches`;
  return row!;
}

async function settled(client: Client, batchId: string): Promise<BatchProjection> {
  return until(
    async () => batchProjectionSchema.parse(await ok(client, "batch_status", { batch_id: batchId })),
    (b) => b.finished_at !== null,
  );
}

beforeAll(async () => {
  tdb = await setupApiDatabase();
  server = await startWebServer({ preload: ["/mcp"] });
  alice = await makeUser(tdb, "alice");
  bob = await makeUser(tdb, "bob");
  worker = spawnWorker(tdb);
});

afterAll(async () => {
  for (const client of clients) await client.close();
  await stopWorker(worker);
  await server?.close();
});

describe("MCP over Streamable HTTP with a personal API token", () => {
  it("lists the five batch tools, each with its input and output schema", async () => {
    const client = await connect(alice.token);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(["batch_results", "batch_status", "cancel_batch", "list_batches", "submit_batch"]);
    const submit = tools.find((t) => t.name === "submit_batch")!;
    // The JSON door's body, described field by field, plus thread_id.
    expect(submit.inputSchema.required).toEqual(["submission_key"]);
    expect(Object.keys(submit.inputSchema.properties ?? {})).toEqual(
      expect.arrayContaining(["submission_key", "items", "files", "prompt_template", "subagent", "output_schema", "checks", "max_cost_usd", "thread_id"]),
    );
    for (const tool of tools) expect(tool.outputSchema?.type).toBe("object");
    expect(tools.find((t) => t.name === "batch_status")!.inputSchema.required).toEqual(["batch_id"]);
  });

  let done: BatchProjection;

  it("submits a batch into a new thread titled from its first item; a worker runs it; a repeat answers the same batch", async () => {
    const client = await connect(alice.token);
    const before = await counts(alice.userId);
    const submitted = batchProjectionSchema.parse(
      await ok(client, "submit_batch", {
        submission_key: "museums-1",
        items: ["Paris", "Rome", "Oslo"],
        prompt_template: "Name one museum in {{item}}.",
      }),
    );
    expect(submitted).toMatchObject({ status: "queued", total: 3, subagent: "general" });
    expect(await counts(alice.userId)).toEqual({ threads: before.threads + 1, batches: before.batches + 1 });
    const [thread] = await tdb.sql<{ title: string; user_id: string }[]>`select title, user_id from threads where id = ${submitted.thread_id}`;
    expect(thread).toEqual({ title: "Name one museum in Paris.", user_id: alice.userId });

    done = await settled(client, submitted.id);
    expect(done).toMatchObject({ id: submitted.id, status: "completed", counts: expect.objectContaining({ succeeded: 3 }) });
    // batch_status is the API's projection of the batch.
    expect(done).toEqual((await api(alice, batchPath(done))).body);

    const again = batchProjectionSchema.parse(
      await ok(client, "submit_batch", { submission_key: "museums-1", items: ["Paris", "Rome", "Oslo"], prompt_template: "Name one museum in {{item}}." }),
    );
    expect(again.id).toBe(submitted.id);
    expect(await counts(alice.userId)).toEqual({ threads: before.threads + 1, batches: before.batches + 1 });
  });

  it("submits into a thread the caller names, and not into someone else's", async () => {
    const client = await connect(alice.token);
    const threadId = await makeThread(tdb, alice);
    const batch = batchProjectionSchema.parse(
      await ok(client, "submit_batch", { thread_id: threadId, submission_key: "named-thread", items: [{ item_key: "k", prompt: "Say hi" }] }),
    );
    expect(batch.thread_id).toBe(threadId);
    const bobsThread = await makeThread(tdb, bob);
    const before = await counts(bob.userId);
    expect(await refused(client, "submit_batch", { thread_id: bobsThread, submission_key: "theirs", items: ["x"] })).toBe("thread not found");
    expect(await counts(bob.userId)).toEqual(before);
    await settled(client, batch.id);
  });

  it("pages item results as the items API does", async () => {
    const client = await connect(alice.token);
    const first = itemPageSchema.parse(await ok(client, "batch_results", { batch_id: done.id, limit: 2 }));
    expect(first.items.map((i) => i.item_key)).toEqual(["item-1", "item-2"]);
    expect(first.items.every((i) => i.status === "succeeded" && i.preview)).toBe(true);
    expect(first).toEqual((await api(alice, `${batchPath(done)}/items?limit=2`)).body);
    const second = itemPageSchema.parse(await ok(client, "batch_results", { batch_id: done.id, limit: 2, cursor: first.next_cursor }));
    expect(second.items.map((i) => i.item_key)).toEqual(["item-3"]);
    expect(second.next_cursor).toBeNull();
    const failed = itemPageSchema.parse(await ok(client, "batch_results", { batch_id: done.id, status: "failed" }));
    expect(failed).toEqual({ items: [], next_cursor: null });

    // Bad values are refused in the API's words.
    expect(await refused(client, "batch_results", { batch_id: done.id, limit: 0 })).toBe("limit: must be a whole number between 1 and 200");
    const badStatus = await refused(client, "batch_results", { batch_id: done.id, status: "done" });
    expect(badStatus).toBe(((await api(alice, `${batchPath(done)}/items?status=done`)).body.error as { message: string }).message);
    expect(badStatus).toMatch(/^status: must be one of /);
  });

  it("cancels a batch (idempotently) and refuses to cancel a finished one", async () => {
    const client = await connect(alice.token);
    const slow = batchProjectionSchema.parse(
      await ok(client, "submit_batch", { submission_key: "slow", items: ["[[sleep:60000]] a", "[[sleep:60000]] b", "[[sleep:60000]] c"] }),
    );
    const cancelled = batchProjectionSchema.parse(await ok(client, "cancel_batch", { batch_id: slow.id }));
    expect(cancelled).toMatchObject({ id: slow.id, status: "cancelled", counts: expect.objectContaining({ cancelled: 3 }) });
    expect(cancelled.finished_at).not.toBeNull();
    expect((await ok(client, "cancel_batch", { batch_id: slow.id })).status).toBe("cancelled");
    const [items] = await tdb.sql<{ unfinished: number }[]>`
      select count(*)::int as unfinished from subagent_batch_items where batch_id = ${slow.id} and status <> 'cancelled'`;
    expect(items!.unfinished).toBe(0);

    const message = await refused(client, "cancel_batch", { batch_id: done.id });
    expect(message).toBe(((await api(alice, `${batchPath(done)}/cancel`, {})).body.error as { message: string }).message);
  });

  it("lists only the caller's batches, newest first, and another user's batch id is not found", async () => {
    const asAlice = await connect(alice.token);
    const asBob = await connect(bob.token);
    const bobs = batchProjectionSchema.parse(await ok(asBob, "submit_batch", { submission_key: "bob-1", items: ["Hello"] }));

    const aliceList = batchListSchema.parse(await ok(asAlice, "list_batches", {}));
    const aliceRows = await tdb.sql<{ id: string }[]>`
      select id from subagent_batches where user_id = ${alice.userId} order by created_at desc, id desc`;
    expect(aliceRows.length).toBeGreaterThanOrEqual(3);
    expect(aliceList.batches.map((b) => b.id)).toEqual(aliceRows.map((r) => r.id));
    expect(aliceList.batches.map((b) => b.id)).not.toContain(bobs.id);
    expect(batchListSchema.parse(await ok(asBob, "list_batches", {})).batches.map((b) => b.id)).toEqual([bobs.id]);
    expect(batchListSchema.parse(await ok(asAlice, "list_batches", { limit: 1 })).batches.map((b) => b.id)).toEqual([aliceRows[0]!.id]);
    expect(await refused(asAlice, "list_batches", { limit: 101 })).toBe("limit: must be a whole number between 1 and 100");

    // Someone else's batch, named in one's own thread, is what the API calls not found.
    const notFound = await api(bob, `/api/threads/${bobs.thread_id}/subagent-batches/${done.id}`);
    expect(notFound.status).toBe(404);
    expect((notFound.body.error as { message: string }).message).toBe("batch not found");
    for (const batchId of [done.id, "not-a-uuid"]) {
      expect(await refused(asBob, "batch_status", { batch_id: batchId })).toBe("batch not found");
      expect(await refused(asBob, "batch_results", { batch_id: batchId })).toBe("batch not found");
      expect(await refused(asBob, "cancel_batch", { batch_id: batchId })).toBe("batch not found");
    }
    expect((await ok(asAlice, "batch_status", { batch_id: done.id })).status).toBe("completed");
    await settled(asBob, bobs.id);
  });

  it("refuses a bad submission naming the field, in the JSON door's words, and writes nothing", async () => {
    const client = await connect(alice.token);
    const threadId = await makeThread(tdb, alice);
    const bodies: [Record<string, unknown>, RegExp][] = [
      [{ submission_key: "bad-1", items: ["fine", ""] }, /^items\.1: /],
      [{ submission_key: "bad-2", items: ["a"], max_live_items: 0 }, /^max_live_items: /],
      [{ items: ["a"] }, /^submission_key: /],
      [{ submission_key: "bad-3", items: ["a"], colour: "blue" }, /colour/],
      [{ submission_key: "bad-4", items: "a" }, /^items: /],
      [{ submission_key: "bad-5", items: ["a"], output_schema: { type: "nonsense" } }, /^output_schema/],
      // Refused by the writer, after the new thread was inserted in the same transaction.
      [{ submission_key: "bad-6", items: ["a"], checks: [{ name: "r", type: "regex", pattern: "(?<=a)b" }] }, /^checks\.0\.pattern: /],
    ];
    const before = await counts(alice.userId);
    for (const [body, field] of bodies) {
      const message = await refused(client, "submit_batch", body);
      expect(message).toMatch(field);
      const door = await api(alice, `/api/threads/${threadId}/subagent-batches`, body);
      expect(door.status).toBe(400);
      expect(message).toBe((door.body.error as { message: string }).message);
    }
    expect(await counts(alice.userId)).toEqual(before);
  });

  it("applies the quotas as any submission does", async () => {
    const client = await connect(alice.token);
    const before = await counts(alice.userId);
    const items = Array.from({ length: 41 }, (_, i) => `item ${i}`);
    expect(await refused(client, "submit_batch", { submission_key: "too-many", items })).toMatch(/^quotas\.max_queued_items: /);
    expect(await counts(alice.userId)).toEqual(before);
  });

  it("bounds a message by http.max_body_bytes (10 MB; 413 past it, before it is parsed), not the SDK's 4 MB", async () => {
    const post = (padBytes: number) =>
      send(server, "/mcp", {
        headers: { authorization: `Bearer ${alice.token}`, accept: "application/json, text/event-stream" },
        json: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "list_batches", arguments: { pad: "x".repeat(padBytes) } } },
      });
    expect((await post(6 * 1024 * 1024)).status).toBe(200);
    expect((await post(10 * 1024 * 1024)).status).toBe(413);
  });

  it("answers 401 without a valid token, and 405 to GET and DELETE", async () => {
    const attempts: Record<string, string>[] = [{}, { authorization: "Bearer flt_not-a-real-token" }, { cookie: "next-auth.session-token=x" }];
    for (const headers of attempts) {
      const res = await send(server, "/mcp", {
        headers: { ...headers, accept: "application/json, text/event-stream" },
        json: { jsonrpc: "2.0", id: 1, method: "tools/list" },
      });
      expect(res.status).toBe(401);
      expect(res.headers["www-authenticate"]).toMatch(/^Bearer /);
      expect(JSON.parse(res.body)).toEqual({
        error: { code: "unauthorized", message: "send a personal API token as Authorization: Bearer <token>" },
      });
    }
    await expect(connect(undefined)).rejects.toMatchObject({ code: 401 });
    for (const method of ["GET", "DELETE"]) {
      const res = await send(server, "/mcp", { method, headers: { authorization: `Bearer ${alice.token}`, accept: "text/event-stream" } });
      expect(res.status).toBe(405);
      expect(res.headers.allow).toBe("POST");
    }
  });
});
