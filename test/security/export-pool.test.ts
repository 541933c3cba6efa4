import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXPORT_POOL_SIZE, EXPORTS_PER_USER, exportPool } from "@/server/http/export";
import { exportsInFlight } from "@/server/instruments";
import { call, makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { type RawDownload, rawDownload } from "../helpers/raw-download";
import { startWebServer, type WebServer } from "../helpers/web-server";
import { freePort } from "../helpers/free-port";

/**
 * Slow readers of the exports (JSONL, CSV) occupy only the exports' own pool: every other request
 * keeps answering. A user has at most EXPORTS_PER_USER exports in progress across every web
 * process (a second one runs here as its own process): one more answers 429 too_many_exports at
 * once, whoever else is exporting.
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let other: ChildProcess | undefined;
let otherPort = 0;

interface Owner {
  user: TestUser;
  threadId: string;
  batchId: string;
}

async function owner(label: string): Promise<Owner> {
  const user = await makeUser(tdb, label);
  const threadId = await makeThread(tdb, user);
  const res = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
    token: user.token,
    json: { submission_key: "big", items: Array.from({ length: 300 }, (_, i) => `item ${i}`) },
  });
  const batchId = (await res.json()).id as string;
  // 30 MB of stored results: more than the socket buffers of a client that reads nothing hold,
  // so the export waits for the reader.
  await tdb.db.execute(sql`update subagent_batch_items set status = 'succeeded', result = repeat('r', 100000) where batch_id = ${batchId}`);
  return { user, threadId, batchId };
}

const exportPath = (o: Owner, file = "results.jsonl") => `/api/threads/${o.threadId}/subagent-batches/${o.batchId}/${file}`;
const open = (port: number, o: Owner, file?: string): RawDownload =>
  rawDownload(port, exportPath(o, file), { authorization: `Bearer ${o.user.token}` });


/** A second web process: the real front door and route handlers (test/helpers/web-process.ts), on this suite's database. */
async function startOtherProcess(): Promise<void> {
  otherPort = await freePort();
  other = spawn(path.resolve("node_modules/.bin/tsx"), ["--conditions=react-server", "test/helpers/web-process.ts", String(otherPort)], {
    env: { ...process.env, DATABASE_URL: tdb.url },
    stdio: ["ignore", "pipe", "inherit"],
  });
  await new Promise<void>((resolve, reject) => {
    other!.stdout!.on("data", (d: Buffer) => {
      if (d.toString().includes("listening")) resolve();
    });
    other!.on("exit", (code) => reject(new Error(`the second web process exited with ${code}`)));
  });
}

beforeAll(async () => {
  await workerAlive(tdb);
  server = await startWebServer();
  await startOtherProcess();
}, 60_000);

afterAll(async () => {
  other?.kill("SIGTERM");
  await server.close();
  await exportPool().end({ timeout: 5 });
});

async function exportSessions(filter: "all" | "in transaction" = "all"): Promise<number> {
  const [row] = await tdb.db.execute<{ n: number }>(
    sql`select count(*)::int as n from pg_stat_activity
         where application_name = 'flotilla-export' and datname = current_database()
           and (${filter} = 'all' or xact_start is not null)`,
  );
  return row!.n;
}

/**
 * Closes each download as soon as it has started (a queued one once it got a connection), and
 * waits until every export let go. A client that leaves before its download starts is noticed
 * only when it starts: then nobody reads it and it ends at the 30 s stall limit.
 */
async function closeAll(downloads: RawDownload[]): Promise<void> {
  await Promise.all(
    downloads.map(async (d) => {
      await d.status;
      d.destroy();
    }),
  );
  await expect.poll(() => exportsInFlight(), { timeout: 5_000, interval: 50 }).toBe(0);
}

async function refusal(download: RawDownload): Promise<{ status: number; code: string; message: string }> {
  download.readAll();
  const status = await download.status;
  const body = JSON.parse((await download.closed).body) as { error: { code: string; message: string } };
  return { status, ...body.error };
}

describe("exports on their own pool", () => {
  // More stalled readers than the main pool has connections (10): on one shared pool, every other request would wait.
  it(`12 clients that never read (6 users, ${EXPORTS_PER_USER} each) hold at most ${EXPORT_POOL_SIZE} connections, and other requests answer at once`, async () => {
    const owners = await Promise.all(Array.from({ length: 6 }, (_, i) => owner(`export-${i}`)));
    const stalled: RawDownload[] = [];
    for (const [i, o] of owners.entries())
      for (let j = 0; j < EXPORTS_PER_USER; j++)
        // results.jsonl and results.csv alike: one stream machinery, one pool.
        stalled.push(open(server.port, o, (i + j) % 2 ? "results.csv" : "results.jsonl"));
    // The pool's first EXPORT_POOL_SIZE answer; the rest wait for a connection.
    await expect.poll(() => exportSessions("in transaction"), { timeout: 5_000, interval: 50 }).toBe(EXPORT_POOL_SIZE);
    await new Promise((r) => setTimeout(r, 300));
    expect(await exportSessions()).toBeLessThanOrEqual(EXPORT_POOL_SIZE);

    // The main pool (10 connections) is untouched: 20 reads in parallel answer promptly.
    const started = Date.now();
    const o = owners[0]!;
    const reads = await Promise.all(
      Array.from({ length: 20 }, () => call("GET", `/api/threads/${o.threadId}/subagent-batches/${o.batchId}`, { token: o.user.token })),
    );
    expect(reads.every((r) => r.status === 200)).toBe(true);
    expect(Date.now() - started).toBeLessThan(3_000);

    // Each client goes away once its download has started: closed downloads give their snapshots
    // back at once, and the queued ones start in turn.
    await closeAll(stalled);
    expect(exportsInFlight()).toBe(0);
    expect(await exportSessions("in transaction")).toBe(0);
  });
});

describe(`at most ${EXPORTS_PER_USER} exports per user`, () => {
  it("refuses a third at once with 429 too_many_exports, in this process and in another one; other users still export", async () => {
    const alice = await owner("alice");
    const bob = await owner("bob");
    // One of alice's in each web process, neither read.
    const here = open(server.port, alice);
    const there = open(otherPort, alice, "results.csv");
    expect(await here.status).toBe(200);
    expect(await there.status).toBe(200);

    // A third, in either process and for either file: refused before any of it is sent.
    for (const [port, file] of [
      [server.port, "results.jsonl"],
      [server.port, "results.csv"],
      [otherPort, "results.jsonl"],
    ] as const) {
      const started = Date.now();
      const third = await refusal(open(port, alice, file));
      expect(third, `${port} ${file}`).toMatchObject({ status: 429, code: "too_many_exports" });
      expect(third.message).toMatch(/^exports: 2 downloads of yours are already in progress/);
      expect(Date.now() - started).toBeLessThan(2_000);
    }

    // Bob's export is not alice's business.
    const bobs = open(server.port, bob);
    expect(await bobs.status).toBe(200);

    // Once one of alice's ends (her client goes away), she may start another.
    there.destroy();
    const next = await (async () => {
      for (;;) {
        const attempt = open(server.port, alice);
        if ((await attempt.status) === 200) return attempt;
        attempt.readAll();
        await attempt.closed;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    next.readAll();
    expect((await next.closed).complete).toBe(true);

    await closeAll([here, bobs]);
  });

  it("counts an export waiting for a connection of the pool: a user's third is refused without waiting", async () => {
    const owners = await Promise.all(["p", "q", "r"].map((l) => owner(`pool-${l}`)));
    // The pool is full (three users' stalled downloads); carol's two wait for a connection.
    const holding = owners.map((o) => open(server.port, o));
    for (const d of holding) expect(await d.status).toBe(200);
    const carol = await owner("carol");
    const waiting = [open(server.port, carol), open(server.port, carol)];
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    expect(await refusal(open(server.port, carol))).toMatchObject({ status: 429, code: "too_many_exports" });
    expect(Date.now() - started).toBeLessThan(2_000);

    await closeAll([...holding, ...waiting]);
  });
});
