import { randomUUID } from "node:crypto";
import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type BatchProjection, batchProjectionSchema, itemPageSchema, itemProjectionSchema, resultLineSchema } from "@/lib/api/batches";
import {
  call,
  errorOf,
  finishItems,
  itemIdAt,
  makeThread,
  makeUser,
  noWorker,
  ORIGIN,
  rowCounts,
  setupApiDatabase,
  type TestUser,
  workerAlive,
} from "./helpers";

const tdb = await setupApiDatabase();

let alice: TestUser;
let bob: TestUser;
let aliceThread: string;
let aliceOtherThread: string;
let bobThread: string;

beforeAll(async () => {
  alice = await makeUser(tdb, "alice");
  bob = await makeUser(tdb, "bob");
  aliceThread = await makeThread(tdb, alice);
  aliceOtherThread = await makeThread(tdb, alice);
  bobThread = await makeThread(tdb, bob);
});

beforeEach(async () => {
  await workerAlive(tdb);
});

const batchesPath = (threadId: string) => `/api/threads/${threadId}/subagent-batches`;
const batchPath = (threadId: string, batchId: string) => `${batchesPath(threadId)}/${batchId}`;

let keySeq = 0;
async function submit(user: TestUser, threadId: string, items: unknown[], extra: Record<string, unknown> = {}) {
  const res = await call("POST", batchesPath(threadId), {
    token: user.token,
    json: { submission_key: `key-${++keySeq}`, items, ...extra },
  });
  expect(res.status, await res.clone().text()).toBe(201);
  return batchProjectionSchema.parse(await res.json());
}

describe("submission", () => {
  it("creates a batch from JSON (201) and replays it idempotently (200, same batch)", async () => {
    const body = {
      submission_key: "idem-1",
      items: ["alpha", "beta", { item_key: "custom", prompt: "gamma" }],
      prompt_template: "Summarize {{item}}",
      max_live_items: 2,
      max_running_items: 1,
    };
    const before = await rowCounts(tdb);
    const created = await call("POST", batchesPath(aliceThread), { token: alice.token, json: body });
    expect(created.status).toBe(201);
    const batch = batchProjectionSchema.parse(await created.json());
    expect(batch).toMatchObject({
      thread_id: aliceThread,
      status: "queued",
      subagent: "general",
      total: 3,
      max_live_items: 2,
      max_running_items: 1,
      counts: { pending: 1, queued: 2, leased: 0, running: 0, succeeded: 0, failed: 0, cancelled: 0 },
      live: 2,
      terminal: 0,
      progress: 0,
    });
    const replay = await call("POST", batchesPath(aliceThread), { token: alice.token, json: body });
    expect(replay.status).toBe(200);
    expect(batchProjectionSchema.parse(await replay.json()).id).toBe(batch.id);
    const after = await rowCounts(tdb);
    expect(after.batches - before.batches).toBe(1);
    expect(after.items - before.items).toBe(3);

    const page = itemPageSchema.parse(await (await call("GET", `${batchPath(aliceThread, batch.id)}/items`, { token: alice.token })).json());
    expect(page.items.map((i) => [i.position, i.item_key, i.status])).toEqual([
      [1, "item-1", "queued"],
      [2, "item-2", "queued"],
      [3, "custom", "pending"],
    ]);
  });

  it("creates a batch from an NDJSON upload with the other fields as query parameters", async () => {
    const lines = ['"one"', "", '{"item_key":"k2","prompt":"two"}', '"three"', ""].join("\n");
    const res = await call("POST", `${batchesPath(aliceThread)}?submission_key=nd-1&prompt_template=Do%20%7B%7Bitem%7D%7D&max_running_items=2`, {
      token: alice.token,
      body: lines,
      contentType: "application/x-ndjson",
    });
    expect(res.status, await res.clone().text()).toBe(201);
    const batch = batchProjectionSchema.parse(await res.json());
    expect(batch.total).toBe(3);
    expect(batch.max_running_items).toBe(2);
    const page = itemPageSchema.parse(await (await call("GET", `${batchPath(aliceThread, batch.id)}/items`, { token: alice.token })).json());
    expect(page.items.map((i) => i.item_key)).toEqual(["item-1", "k2", "item-3"]);
    const [row] = await tdb.sql<{ prompt: string }[]>`select prompt from subagent_batch_items where batch_id = ${batch.id} and position = 1`;
    expect(row!.prompt).toBe("Do one");

    const replay = await call("POST", `${batchesPath(aliceThread)}?submission_key=nd-1`, {
      token: alice.token,
      body: '"other"\n',
      contentType: "application/x-ndjson",
    });
    expect(replay.status).toBe(200);
    expect(batchProjectionSchema.parse(await replay.json()).id).toBe(batch.id);
  });

  it("refuses a submission key already used in another thread of the same user (409, nothing written)", async () => {
    await submit(alice, aliceThread, ["x"], { submission_key: "shared-key" });
    const before = await rowCounts(tdb);
    const res = await call("POST", batchesPath(aliceOtherThread), {
      token: alice.token,
      json: { submission_key: "shared-key", items: ["x"] },
    });
    expect(res.status).toBe(409);
    expect((await errorOf(res)).message).toContain("submission_key");
    expect(await rowCounts(tdb)).toEqual(before);
  });

  it("scopes submission keys per user: another user's identical key is a new batch", async () => {
    const a = await submit(alice, aliceThread, ["x"], { submission_key: "per-user" });
    const b = await submit(bob, bobThread, ["x"], { submission_key: "per-user" });
    expect(b.id).not.toBe(a.id);
  });
});

describe("reads", () => {
  it("lists the thread's batches newest first and shows one batch", async () => {
    const thread = await makeThread(tdb, alice);
    const first = await submit(alice, thread, ["a"]);
    const second = await submit(alice, thread, ["b", "c"]);
    const list = await call("GET", batchesPath(thread), { token: alice.token });
    expect(list.status).toBe(200);
    const body = (await list.json()) as { batches: BatchProjection[] };
    expect(body.batches.map((b) => b.id)).toEqual([second.id, first.id]);
    const detail = await call("GET", batchPath(thread, first.id), { token: alice.token });
    expect(detail.status).toBe(200);
    expect(batchProjectionSchema.parse(await detail.json())).toEqual(first);
  });

  it("pages items by position with a cursor, a default of 50, at most 200, and a status filter", async () => {
    const batch = await submit(alice, aliceThread, Array.from({ length: 230 }, (_, i) => `item ${i + 1}`));
    await finishItems(tdb, batch.id, [3, 60, 61, 200], { status: "failed", error: "boom" });

    const seen: number[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const path: string = `${batchPath(aliceThread, batch.id)}/items${cursor ? `?cursor=${cursor}` : ""}`;
      const page = itemPageSchema.parse(await (await call("GET", path, { token: alice.token })).json());
      expect(page.items.length).toBeLessThanOrEqual(50);
      seen.push(...page.items.map((i) => i.position));
      cursor = page.next_cursor;
      pages++;
    } while (cursor);
    expect(pages).toBe(5);
    expect(seen).toEqual(Array.from({ length: 230 }, (_, i) => i + 1));

    const big = itemPageSchema.parse(await (await call("GET", `${batchPath(aliceThread, batch.id)}/items?limit=200`, { token: alice.token })).json());
    expect(big.items).toHaveLength(200);
    expect(big.next_cursor).not.toBeNull();

    const failedFirst = itemPageSchema.parse(
      await (await call("GET", `${batchPath(aliceThread, batch.id)}/items?status=failed&limit=3`, { token: alice.token })).json(),
    );
    expect(failedFirst.items.map((i) => [i.position, i.status, i.error])).toEqual([
      [3, "failed", "boom"],
      [60, "failed", "boom"],
      [61, "failed", "boom"],
    ]);
    const failedRest = itemPageSchema.parse(
      await (
        await call("GET", `${batchPath(aliceThread, batch.id)}/items?status=failed&limit=3&cursor=${failedFirst.next_cursor}`, {
          token: alice.token,
        })
      ).json(),
    );
    expect(failedRest.items.map((i) => i.position)).toEqual([200]);
    expect(failedRest.next_cursor).toBeNull();
  });

  it("bounds previews and errors in pages while the export carries the full result", async () => {
    const batch = await submit(alice, aliceThread, ["a", "b"]);
    const long = "r".repeat(50_000);
    await finishItems(tdb, batch.id, [1], { status: "succeeded", result: long });
    await tdb.sql`update subagent_batch_items set preview = ${long} where batch_id = ${batch.id} and position = 1`;
    await finishItems(tdb, batch.id, [2], { status: "failed", error: "e".repeat(50_000) });
    const page = itemPageSchema.parse(await (await call("GET", `${batchPath(aliceThread, batch.id)}/items`, { token: alice.token })).json());
    expect(page.items[0]!.preview!.length).toBeLessThanOrEqual(2_000);
    expect(page.items[1]!.error!.length).toBeLessThanOrEqual(2_000);

    const res = await call("GET", `${batchPath(aliceThread, batch.id)}/results.jsonl`, { token: alice.token });
    expect(res.status).toBe(200);
    const lines = (await res.text()).trimEnd().split("\n").map((l) => resultLineSchema.parse(JSON.parse(l)));
    expect(lines[0]!.result).toBe(long);
    expect(lines[1]!.error).toHaveLength(50_000);
  });

  it("exports every item as JSONL in position order, as an attachment, with no worker running", async () => {
    const batch = await submit(alice, aliceThread, ["a", "b", "c", "d"]);
    await finishItems(tdb, batch.id, [1, 3], { status: "succeeded", result: "done ✓ \"quoted\"\nnewline" });
    await finishItems(tdb, batch.id, [4], { status: "failed", error: "nope" });
    await noWorker(tdb);
    const res = await call("GET", `${batchPath(aliceThread, batch.id)}/results.jsonl`, { token: alice.token });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/x-ndjson/);
    const name = `batch-${batch.id}-results.jsonl`;
    expect(res.headers.get("content-disposition")).toBe(`attachment; filename="${name}"; filename*=UTF-8''${name}`);
    const text = await res.text();
    expect(text.endsWith("\n")).toBe(true);
    const lines = text.trimEnd().split("\n").map((l) => resultLineSchema.parse(JSON.parse(l)));
    expect(lines.map((l) => [l.position, l.item_key, l.status, l.result, l.error])).toEqual([
      [1, "item-1", "succeeded", 'done ✓ "quoted"\nnewline', null],
      [2, "item-2", "queued", null, null],
      [3, "item-3", "succeeded", 'done ✓ "quoted"\nnewline', null],
      [4, "item-4", "failed", null, "nope"],
    ]);
    expect(lines[0]!.usage.output_tokens).toBeGreaterThan(0);
  });

  it("serves every read with no worker alive", async () => {
    const batch = await submit(alice, aliceThread, ["a"]);
    await noWorker(tdb);
    for (const path of [batchesPath(aliceThread), batchPath(aliceThread, batch.id), `${batchPath(aliceThread, batch.id)}/items`])
      expect((await call("GET", path, { token: alice.token })).status).toBe(200);
  });
});

describe("controls", () => {
  const control = (user: TestUser, threadId: string, batchId: string, action: string) =>
    call("POST", `${batchPath(threadId, batchId)}/${action}`, { token: user.token });

  it("pauses, resumes and cancels, idempotently where repeating is harmless", async () => {
    const batch = await submit(alice, aliceThread, ["a", "b", "c"]);
    for (let i = 0; i < 2; i++) {
      const res = await control(alice, aliceThread, batch.id, "pause");
      expect(res.status).toBe(200);
      expect(batchProjectionSchema.parse(await res.json()).status).toBe("paused");
    }
    for (let i = 0; i < 2; i++) {
      const res = await control(alice, aliceThread, batch.id, "resume");
      expect(res.status).toBe(200);
      expect(batchProjectionSchema.parse(await res.json()).status).toBe("queued");
    }
    await finishItems(tdb, batch.id, [1], { status: "running" });
    for (let i = 0; i < 2; i++) {
      const res = await control(alice, aliceThread, batch.id, "cancel");
      expect(res.status).toBe(200);
      const body = batchProjectionSchema.parse(await res.json());
      expect(body.status).toBe("cancelled");
      expect(body.counts).toMatchObject({ cancelled: 3, queued: 0, running: 0, pending: 0 });
      expect(body.finished_at).not.toBeNull();
    }
    const [leases] = await tdb.sql<{ n: number }[]>`
      select count(*)::int as n from subagent_batch_items where batch_id = ${batch.id} and lease_owner is not null`;
    expect(leases!.n).toBe(0);
  });

  it("answers 409 with a clear message when the state forbids the control, changing nothing", async () => {
    const cancelled = await submit(alice, aliceThread, ["a", "b"]);
    await finishItems(tdb, cancelled.id, [1], { status: "failed", error: "x" });
    expect((await control(alice, aliceThread, cancelled.id, "cancel")).status).toBe(200);
    const completed = await submit(alice, aliceThread, ["a", "b"]);
    await finishItems(tdb, completed.id, [1], { status: "succeeded", result: "ok" });
    await finishItems(tdb, completed.id, [2], { status: "failed", error: "x" });

    const cases: [string, string, string, RegExp][] = [
      ["resume of a cancelled batch", cancelled.id, "resume", /cancelled/],
      ["pause of a cancelled batch", cancelled.id, "pause", /cancelled/],
      ["pause of a completed batch", completed.id, "pause", /completed/],
      ["resume of a completed batch", completed.id, "resume", /completed/],
      ["cancel of a completed batch", completed.id, "cancel", /completed/],
    ];
    for (const [name, batchId, action, message] of cases) {
      const before = await rowCounts(tdb);
      const res = await control(alice, aliceThread, batchId, action);
      expect(res.status, name).toBe(409);
      const err = await errorOf(res);
      expect(err.code, name).toBe("conflict");
      expect(err.message, name).toMatch(message);
      expect(await rowCounts(tdb), name).toEqual(before);
    }

    const retry = (batchId: string, itemId: string) =>
      call("POST", `${batchPath(aliceThread, batchId)}/items/${itemId}/retry`, { token: alice.token });
    const retryCases: [string, string, number, RegExp][] = [
      ["retry of a succeeded item", completed.id, 1, /succeeded/],
      ["retry of an item of a cancelled batch", cancelled.id, 1, /cancelled/],
    ];
    for (const [name, batchId, position, message] of retryCases) {
      const before = await rowCounts(tdb);
      const res = await retry(batchId, await itemIdAt(tdb, batchId, position));
      expect(res.status, name).toBe(409);
      expect((await errorOf(res)).message, name).toMatch(message);
      expect(await rowCounts(tdb), name).toEqual(before);
    }
    const queued = await submit(alice, aliceThread, ["a"]);
    const res = await retry(queued.id, await itemIdAt(tdb, queued.id, 1));
    expect(res.status).toBe(409);
    expect((await errorOf(res)).message).toMatch(/queued/);
  });

  it("serves the controls through one [action] route: an unknown action is a 404 JSON error, changing nothing", async () => {
    const batch = await submit(alice, aliceThread, ["a"]);
    const { POST } = await import("@/app/api/threads/[threadId]/subagent-batches/[batchId]/[action]/route");
    for (const action of ["retry", "delete", "PAUSE", ""]) {
      const before = await rowCounts(tdb);
      const url = new URL(`${batchPath(aliceThread, batch.id)}/${action}`, ORIGIN);
      const req = new Request(url, { method: "POST", headers: { authorization: `Bearer ${alice.token}` } });
      const res = await POST(req, { params: Promise.resolve({ threadId: aliceThread, batchId: batch.id, action }) });
      expect(res.status, action).toBe(404);
      expect((await errorOf(res)).code, action).toBe("not_found");
      expect(await rowCounts(tdb), action).toEqual(before);
    }
  });

  it("resumes a batch that had started to running, one that never started to queued", async () => {
    const batch = await submit(alice, aliceThread, ["a", "b"]);
    await finishItems(tdb, batch.id, [1], { status: "running" });
    await tdb.sql`update subagent_batches set status = 'running', started_at = now() where id = ${batch.id}`;
    expect((await control(alice, aliceThread, batch.id, "pause")).status).toBe(200);
    const res = await control(alice, aliceThread, batch.id, "resume");
    expect(batchProjectionSchema.parse(await res.json()).status).toBe("running");
  });

  it("retries a failed item of a finished batch: the item is queued again and the batch reopens", async () => {
    const batch = await submit(alice, aliceThread, ["a", "b"]);
    await finishItems(tdb, batch.id, [1], { status: "succeeded", result: "ok" });
    await finishItems(tdb, batch.id, [2], { status: "failed", error: "x" });
    const finished = batchProjectionSchema.parse(await (await call("GET", batchPath(aliceThread, batch.id), { token: alice.token })).json());
    expect(finished.status).toBe("completed");
    const itemId = await itemIdAt(tdb, batch.id, 2);
    const res = await call("POST", `${batchPath(aliceThread, batch.id)}/items/${itemId}/retry`, { token: alice.token });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { item: unknown; batch: unknown };
    const item = itemProjectionSchema.parse(body.item);
    const reopened = batchProjectionSchema.parse(body.batch);
    expect(item).toMatchObject({ id: itemId, status: "queued", attempts: 0, error: null });
    expect(reopened.status).toBe("running");
    expect(reopened.finished_at).toBeNull();
    expect(reopened.counts).toMatchObject({ succeeded: 1, failed: 0, queued: 1 });
  });

  it("answers 503 worker_unavailable for every control when no worker is alive, changing nothing", async () => {
    const batch = await submit(alice, aliceThread, ["a", "b"]);
    await finishItems(tdb, batch.id, [2], { status: "failed", error: "x" });
    const itemId = await itemIdAt(tdb, batch.id, 2);
    const paths = ["pause", "resume", "cancel", `items/${itemId}/retry`].map((p) => `${batchPath(aliceThread, batch.id)}/${p}`);

    const scenarios: [string, () => Promise<unknown>][] = [
      ["no heartbeat at all", () => noWorker(tdb)],
      ["a stale heartbeat", () => tdb.sql`update worker_heartbeats set last_heartbeat_at = now() - interval '10 minutes'`],
      ["a worker that said it stopped", () => tdb.sql`update worker_heartbeats set stopped_at = now()`],
      ["only a web process heartbeat", () => tdb.sql`update worker_heartbeats set kind = 'web'`],
    ];
    for (const [name, arrange] of scenarios) {
      await workerAlive(tdb);
      await arrange();
      for (const path of paths) {
        const before = await rowCounts(tdb);
        const res = await call("POST", path, { token: alice.token });
        expect(res.status, `${name}: ${path}`).toBe(503);
        const err = await errorOf(res);
        expect(err.code).toBe("worker_unavailable");
        expect(err.message).toMatch(/worker/);
        expect(await rowCounts(tdb)).toEqual(before);
      }
      await tdb.sql`delete from worker_heartbeats`;
    }
    await workerAlive(tdb);
    expect((await call("POST", paths[0]!, { token: alice.token })).status).toBe(200);
  });
});

describe("ownership: another user's or another thread's thread, batch or item is 404", () => {
  it("answers 404 on every route for every foreign or malformed id, and writes nothing", async () => {
    const mine = await submit(alice, aliceThread, ["a", "b"]);
    await finishItems(tdb, mine.id, [1], { status: "failed", error: "x" });
    const myItem = await itemIdAt(tdb, mine.id, 1);
    const theirs = await submit(bob, bobThread, ["a"]);
    await finishItems(tdb, theirs.id, [1], { status: "failed", error: "x" });
    const theirItem = await itemIdAt(tdb, theirs.id, 1);
    const otherThreadBatch = await submit(alice, aliceOtherThread, ["a"]);
    await finishItems(tdb, otherThreadBatch.id, [1], { status: "failed", error: "x" });
    const otherThreadItem = await itemIdAt(tdb, otherThreadBatch.id, 1);
    const missing = randomUUID();

    // What does not resolve for `who`: the thread (every route 404), the batch (every batch
    // route 404) or only the item (retry 404).
    type Level = "thread" | "batch" | "item";
    const combos: [string, Level, TestUser, string, string, string][] = [
      ["bob on alice's thread and batch", "thread", bob, aliceThread, mine.id, myItem],
      ["alice on bob's thread and batch", "thread", alice, bobThread, theirs.id, theirItem],
      ["unknown thread", "thread", alice, missing, mine.id, myItem],
      ["malformed thread id", "thread", alice, "not-a-uuid", mine.id, myItem],
      ["uppercase garbage thread id", "thread", alice, "ZZZZZZZZ-ZZZZ-ZZZZ-ZZZZ-ZZZZZZZZZZZZ", mine.id, myItem],
      ["alice's batch under her other thread", "batch", alice, aliceOtherThread, mine.id, myItem],
      ["bob's batch under alice's thread", "batch", alice, aliceThread, theirs.id, theirItem],
      ["a batch of another thread under this thread", "batch", alice, aliceThread, otherThreadBatch.id, otherThreadItem],
      ["unknown batch", "batch", alice, aliceThread, missing, myItem],
      ["malformed batch id", "batch", alice, aliceThread, "123", myItem],
      ["an item of another batch of the same user", "item", alice, aliceThread, mine.id, otherThreadItem],
      ["an item of another user", "item", alice, aliceThread, mine.id, theirItem],
      ["unknown item", "item", alice, aliceThread, mine.id, missing],
      ["malformed item id", "item", alice, aliceThread, mine.id, "'; drop table users; --"],
    ];

    for (const [name, level, who, thread, batchId, itemId] of combos) {
      const requests: [string, string, Record<string, unknown>?][] = [
        ["POST", `${batchPath(thread, batchId)}/items/${encodeURIComponent(itemId)}/retry`],
      ];
      if (level !== "item")
        requests.push(
          ["GET", batchPath(thread, batchId)],
          ["GET", `${batchPath(thread, batchId)}/items`],
          ["GET", `${batchPath(thread, batchId)}/results.jsonl`],
          ["POST", `${batchPath(thread, batchId)}/pause`],
          ["POST", `${batchPath(thread, batchId)}/resume`],
          ["POST", `${batchPath(thread, batchId)}/cancel`],
        );
      if (level === "thread")
        requests.push(["GET", batchesPath(thread)], ["POST", batchesPath(thread), { submission_key: `x-${randomUUID()}`, items: ["a"] }]);
      // Scripts (Bearer) and browsers (same-origin session cookie) see the same 404s.
      const credentials = [{ token: who.token }, { cookie: who.cookie, headers: { origin: ORIGIN } }];
      for (const [method, path, json] of requests)
        for (const credential of credentials) {
          const before = await rowCounts(tdb);
          const res = await call(method, path, { ...credential, json });
          const label = `${name}: ${method} ${path} (${credential.token ? "bearer" : "cookie"})`;
          expect(res.status, label).toBe(404);
          expect((await errorOf(res)).code).toBe("not_found");
          expect(await rowCounts(tdb), label).toEqual(before);
        }
    }
    // The same 404 for a foreign id arrives before the worker check (no existence oracle via 503).
    await noWorker(tdb);
    const res = await call("POST", `${batchPath(aliceThread, theirs.id)}/pause`, { token: alice.token });
    expect(res.status).toBe(404);
    const item = await call("POST", `${batchPath(aliceThread, mine.id)}/items/${theirItem}/retry`, { token: alice.token });
    expect(item.status).toBe(404);
  });
});

describe("authentication", () => {
  it("answers 401 on every route without valid credentials", async () => {
    const batch = await submit(alice, aliceThread, ["a"]);
    const itemId = await itemIdAt(tdb, batch.id, 1);
    const requests: [string, string][] = [
      ["GET", "/api/features"],
      ["GET", batchesPath(aliceThread)],
      ["POST", batchesPath(aliceThread)],
      ["GET", batchPath(aliceThread, batch.id)],
      ["GET", `${batchPath(aliceThread, batch.id)}/items`],
      ["POST", `${batchPath(aliceThread, batch.id)}/pause`],
      ["POST", `${batchPath(aliceThread, batch.id)}/resume`],
      ["POST", `${batchPath(aliceThread, batch.id)}/cancel`],
      ["POST", `${batchPath(aliceThread, batch.id)}/items/${itemId}/retry`],
      ["GET", `${batchPath(aliceThread, batch.id)}/results.jsonl`],
    ];
    const credentials: [string, { token?: string; cookie?: string; headers?: Record<string, string> }][] = [
      ["none", {}],
      ["unknown bearer token", { token: `flt_${"A".repeat(43)}` }],
      ["malformed bearer", { headers: { authorization: "Bearer" } }],
      ["basic auth", { headers: { authorization: "Basic YWxpY2U6cGFzcw==" } }],
      ["forged session cookie", { cookie: "next-auth.session-token=eyJhbGciOiJub25lIn0.e30." }],
    ];
    for (const [credential, options] of credentials)
      for (const [method, path] of requests) {
        const before = await rowCounts(tdb);
        const res = await call(method, path, { ...options, json: method === "POST" ? { submission_key: "z", items: ["a"] } : undefined });
        expect(res.status, `${credential}: ${method} ${path}`).toBe(401);
        expect((await errorOf(res)).code).toBe("unauthorized");
        expect(await rowCounts(tdb)).toEqual(before);
      }
  });
});

describe("cross-site requests", () => {
  it("accepts same-origin cookie mutations, rejects cross-site ones with 403, and exempts Bearer", async () => {
    const batch = await submit(alice, aliceThread, ["a", "b"]);
    const submitBody = () => ({ submission_key: `cookie-${randomUUID()}`, items: ["a"] });

    const sameOrigin = await call("POST", batchesPath(aliceThread), {
      cookie: alice.cookie,
      headers: { origin: ORIGIN, "sec-fetch-site": "same-origin" },
      json: submitBody(),
    });
    expect(sameOrigin.status).toBe(201);

    const mutations: [string, () => Record<string, unknown> | undefined][] = [
      [batchesPath(aliceThread), submitBody],
      [`${batchPath(aliceThread, batch.id)}/pause`, () => undefined],
      [`${batchPath(aliceThread, batch.id)}/resume`, () => undefined],
      [`${batchPath(aliceThread, batch.id)}/cancel`, () => undefined],
      [`${batchPath(aliceThread, batch.id)}/items/${await itemIdAt(tdb, batch.id, 1)}/retry`, () => undefined],
    ];
    const hostile: [string, Record<string, string>][] = [
      ["foreign Origin", { origin: "https://evil.example" }],
      ["Sec-Fetch-Site cross-site", { "sec-fetch-site": "cross-site" }],
      ["opaque Origin", { origin: "null" }],
    ];
    for (const [path, body] of mutations)
      for (const [name, headers] of hostile) {
        const before = await rowCounts(tdb);
        const res = await call("POST", path, { cookie: alice.cookie, headers, json: body() });
        expect(res.status, `${name}: ${path}`).toBe(403);
        expect((await errorOf(res)).code).toBe("forbidden");
        expect(await rowCounts(tdb)).toEqual(before);
      }

    // Bearer requests carry no ambient authority: a foreign Origin does not matter.
    const bearer = await call("POST", `${batchPath(aliceThread, batch.id)}/pause`, {
      token: alice.token,
      headers: { origin: "https://evil.example", "sec-fetch-site": "cross-site" },
    });
    expect(bearer.status).toBe(200);
    // Reads are not state-changing: a cross-site GET with the cookie is answered.
    const read = await call("GET", batchPath(aliceThread, batch.id), { cookie: alice.cookie, headers: { origin: "https://evil.example" } });
    expect(read.status).toBe(200);
  });
});
