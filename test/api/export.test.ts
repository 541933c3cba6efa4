import { beforeAll, describe, expect, it } from "vitest";
import { batchProjectionSchema, resultLineSchema } from "@/lib/api/batches";
import { exportResultsStream } from "@/server/http/export";
import { exportArgs } from "../helpers/export";
import { call, finishItems, makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "./helpers";

type Line = ReturnType<typeof resultLineSchema.parse>;

const tdb = await setupApiDatabase();

let user: TestUser;
let thread: string;

beforeAll(async () => {
  user = await makeUser(tdb, "export");
  thread = await makeThread(tdb, user);
  await workerAlive(tdb);
});

async function newBatch(count: number): Promise<string> {
  const res = await call("POST", `/api/threads/${thread}/subagent-batches`, {
    token: user.token,
    json: { submission_key: `exp-${Date.now()}-${Math.random()}`, items: Array.from({ length: count }, (_, i) => `item ${i + 1}`) },
  });
  expect(res.status).toBe(201);
  return batchProjectionSchema.parse(await res.json()).id;
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);
const exportPath = (batchId: string) => `/api/threads/${thread}/subagent-batches/${batchId}/results.jsonl`;

function parseLines(text: string): Line[] {
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Line);
}

/** Other sessions of this database inside a transaction (an export's snapshot holds one). */
async function openTransactions(): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where datname = current_database() and xact_start is not null and pid <> pg_backend_pid()`;
  return row!.n;
}

async function eventually(check: () => Promise<boolean>, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe("results.jsonl", () => {
  it("streams many cursor fetches in position order with full results", async () => {
    const batchId = await newBatch(1_200);
    await finishItems(tdb, batchId, range(1, 1_200), { status: "succeeded", result: "x".repeat(3_000) });
    const res = await call("GET", exportPath(batchId), { token: user.token });
    expect(res.body).toBeInstanceOf(ReadableStream);
    const text = await res.text();
    // Compact JSON in the schema's key order, exactly as JSON.stringify would write it.
    for (const raw of text.split("\n").filter(Boolean)) expect(JSON.stringify(resultLineSchema.parse(JSON.parse(raw)))).toBe(raw);
    const lines = parseLines(text);
    expect(lines.map((l) => l.position)).toEqual(range(1, 1_200));
    expect(lines.every((l) => l.status === "succeeded" && l.result === "x".repeat(3_000))).toBe(true);
  });

  it("exports one consistent snapshot of a batch that changes while it downloads", async () => {
    const batchId = await newBatch(400);
    await finishItems(tdb, batchId, range(1, 100), { status: "succeeded", result: `early ${"e".repeat(2_000)}` });
    await finishItems(tdb, batchId, range(101, 110), { status: "running" });

    const res = await call("GET", exportPath(batchId), { token: user.token });
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    const first = await reader.read();
    let text = decoder.decode(first.value, { stream: true });
    // The snapshot is taken; now the batch moves on (a worker finishes everything).
    await finishItems(tdb, batchId, range(101, 400), { status: "succeeded", result: "late" });
    const [after] = await tdb.sql<{ succeeded_count: number; status: string }[]>`
      select succeeded_count, status from subagent_batches where id = ${batchId}`;
    expect(after).toEqual({ succeeded_count: 400, status: "completed" });
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    const lines = parseLines(text);
    expect(lines).toHaveLength(400);
    expect(lines.slice(0, 100).every((l) => l.status === "succeeded" && String(l.result).startsWith("early"))).toBe(true);
    expect(lines.slice(100, 110).every((l) => l.status === "running" && l.result === null)).toBe(true);
    expect(lines.slice(110).every((l) => (l.status === "queued" || l.status === "pending") && l.result === null)).toBe(true);
    expect(lines.some((l) => l.result === "late")).toBe(false);

    // A fresh export sees the new state.
    const again = parseLines(await (await call("GET", exportPath(batchId), { token: user.token })).text());
    expect(again.filter((l) => l.result === "late")).toHaveLength(300);
  });

  it("releases its transaction and connection when the client goes away mid-download", async () => {
    const batchId = await newBatch(600);
    await finishItems(tdb, batchId, range(1, 600), { status: "succeeded", result: "c".repeat(20_000) });
    const res = await call("GET", exportPath(batchId), { token: user.token });
    const reader = res.body!.getReader();
    await reader.read();
    expect(await openTransactions()).toBeGreaterThan(0);
    await reader.cancel();
    await eventually(async () => (await openTransactions()) === 0);
    // The pool still serves the next request.
    const next = await call("GET", exportPath(batchId), { token: user.token });
    expect(next.status).toBe(200);
    expect(parseLines(await next.text())).toHaveLength(600);
  });

  it("stops and releases its transaction when the request is aborted, even if the body is never cancelled", async () => {
    const batchId = await newBatch(600);
    await finishItems(tdb, batchId, range(1, 600), { status: "succeeded", result: "a".repeat(20_000) });
    const abort = new AbortController();
    const res = await call("GET", exportPath(batchId), { token: user.token, signal: abort.signal });
    const reader = res.body!.getReader();
    await reader.read();
    abort.abort();
    let failure: unknown;
    try {
      for (;;) if ((await reader.read()).done) break;
    } catch (err) {
      failure = err;
    }
    expect(String(failure)).toMatch(/disconnected/);
    await eventually(async () => (await openTransactions()) === 0);
  });

  it("always settles and releases its transaction when stopped at any moment (abort or cancel racing the fetches)", async () => {
    const batchId = await newBatch(300);
    await finishItems(tdb, batchId, range(1, 300), { status: "succeeded", result: "r".repeat(10_000) });
    for (const how of ["abort", "cancel"] as const)
      for (const delayMs of [0, 1, 3, 10, 30]) {
        const abort = new AbortController();
        const stream = await exportResultsStream(tdb.sql, exportArgs(batchId, { fetchRows: 4, signal: abort.signal }));
        const reader = stream.getReader();
        const reading = (async () => {
          try {
            for (;;) if ((await reader.read()).done) return "done";
          } catch {
            return "error";
          }
        })();
        await new Promise((r) => setTimeout(r, delayMs));
        if (how === "abort") abort.abort();
        else await reader.cancel();
        // The reader always settles: finished, errored, or (after cancel) closed.
        expect(["done", "error"]).toContain(await reading);
        await eventually(async () => (await openTransactions()) === 0);
      }
  });

  it("delivers the final, partial fetch to a reader slower than the database", async () => {
    const batchId = await newBatch(10);
    await finishItems(tdb, batchId, range(1, 10), { status: "succeeded", result: "p".repeat(1_000) });
    // 10 rows at 4 per fetch: the last fetch holds 2, and it is encoded while the reader still
    // holds the previous chunk, so it must wait for demand after the query itself has ended.
    const reader = (await exportResultsStream(tdb.sql, exportArgs(batchId, { fetchRows: 4 }))).getReader();
    let text = "";
    for (;;) {
      await new Promise((r) => setTimeout(r, 50));
      const { done, value } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString("utf8");
    }
    expect(parseLines(text).map((l) => l.position)).toEqual(range(1, 10));
    await eventually(async () => (await openTransactions()) === 0);
  });

  it("sizes each fetch from the rows it will read: short rows followed by long ones never make one large fetch", async () => {
    const batchId = await newBatch(400);
    // 300 rows of 10 bytes, then 100 of 50 kB: a fetch sized from the rows before the jump would hold them all (5 MB).
    await finishItems(tdb, batchId, range(1, 300), { status: "succeeded", result: "a".repeat(10) });
    await finishItems(tdb, batchId, range(301, 400), { status: "succeeded", result: "b".repeat(50_000) });
    const chunks: Buffer[] = [];
    for await (const chunk of (await exportResultsStream(tdb.sql, exportArgs(batchId, { fetchBytes: 200_000 }))) as unknown as AsyncIterable<Uint8Array>)
      chunks.push(Buffer.from(chunk));
    expect(parseLines(Buffer.concat(chunks).toString("utf8")).map((l) => l.position)).toEqual(range(1, 400));
    // Each fetch stops once the rows before its last hold 200 kB: at most 4 long rows a chunk (with short rows' lines before them).
    for (const chunk of chunks) expect(chunk.byteLength).toBeLessThan(4 * 50_000 + 100_000);
    expect(chunks.filter((c) => c.includes("bbbb")).length).toBeGreaterThanOrEqual(25);
  });

  it("fetches only as fast as the client reads: a stalled reader is cut off, not buffered", async () => {
    const batchId = await newBatch(600);
    await finishItems(tdb, batchId, range(1, 600), { status: "succeeded", result: "s".repeat(20_000) });
    // 600 × 20 kB = 12 MB; without backpressure it would all be read into the queue at once and
    // the stream would finish on its own. With backpressure the producer waits, then gives up.
    const stream = await exportResultsStream(tdb.sql, exportArgs(batchId, { fetchRows: 8, stallMs: 300 }));
    const reader = stream.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    await new Promise((r) => setTimeout(r, 700));
    let received = first.value!.byteLength;
    let failure: unknown;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        received += value.byteLength;
      }
    } catch (err) {
      failure = err;
    }
    expect(String(failure)).toMatch(/stopped reading/);
    expect(received).toBeLessThan(1024 * 1024);
    await eventually(async () => (await openTransactions()) === 0);
  });
});
