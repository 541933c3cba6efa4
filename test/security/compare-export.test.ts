import Papa from "papaparse";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportPool } from "@/server/http/export";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { rawDownload } from "../helpers/raw-download";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * compare.csv is an export like results.jsonl, over real HTTP: it takes one of the user's export
 * slots (a third download of theirs is 429 too_many_exports), it holds its snapshot and connection
 * at most `exports.max_seconds`, a page's database work does not grow with the other batch's size
 * (each pair is looked up by key, not by hashing every item of b), and its cells are guarded
 * against spreadsheet formulas as results.csv's are, hidden behind invisible characters included.
 */

const MAX_SECONDS = 2;
process.env.FLOTILLA__EXPORTS__MAX_SECONDS = String(MAX_SECONDS);
// Answers shown whole up to 10,000 characters, so the file (~100 MB) is far more than a client's
// kernel buffers can take: Linux grows a socket's receive buffer up to tcp_rmem's maximum (32 MiB
// on this machine), and a 20 MB file sometimes fitted whole, so a client that never read still
// got all of it before the cut (a flaky "complete").
const ANSWER_CHARS = 10_000;
process.env.FLOTILLA__SUBAGENT_BATCHES__RESULT_PREVIEW_MAX_CHARS = String(ANSWER_CHARS);

const tdb = await setupApiDatabase();
let server: WebServer;
let user: TestUser;
let threadId: string;
/** 5,000 items each (item-1 .. item-5000), answers of ANSWER_CHARS: about 100 MB of pairs, more than the kernel buffers of a client that never reads. */
let bigA: string;
let bigB: string;

async function submit(items: unknown[], extra: Record<string, unknown> = {}): Promise<string> {
  const res = await fetch(`${server.origin}/api/threads/${threadId}/subagent-batches`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify({ submission_key: `cmp-${Math.random()}`, items, ...extra }),
  });
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches/[batchId]/compare/[otherId]/compare.csv"] });
  user = await makeUser(tdb, "comparer");
  threadId = await makeThread(tdb, user);
  await workerAlive(tdb);
  const items = Array.from({ length: 5_000 }, (_, i) => `item ${i}`);
  bigA = await submit(items);
  bigB = await submit(items);
  for (const [id, fill] of [[bigA, "a"], [bigB, "b"]] as const)
    await tdb.sql`update subagent_batch_items set status = 'succeeded', result = repeat(${fill}, ${ANSWER_CHARS}), started_at = now(), finished_at = now() where batch_id = ${id}`;
}, 120_000);

afterAll(async () => {
  await server.close();
  await exportPool().end({ timeout: 5 });
});

const csvPath = (a: string, b: string, query = "") => `/api/threads/${threadId}/subagent-batches/${a}/compare/${b}/compare.csv${query}`;
const auth = () => ({ authorization: `Bearer ${user.token}` });

/** Export-pool sessions inside a transaction: an export holding its snapshot. */
async function heldSnapshots(): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where application_name = 'flotilla-export' and datname = current_database() and xact_start is not null`;
  return row!.n;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("compare.csv under the exports' limits", () => {
  it("takes one of the user's two export slots: a third download of theirs is refused 429 until one ends", async () => {
    const held = [rawDownload(server.port, csvPath(bigA, bigB), auth()), rawDownload(server.port, csvPath(bigB, bigA), auth())];
    for (const d of held) expect(await d.status).toBe(200);
    for (const path of [csvPath(bigA, bigB), `/api/threads/${threadId}/subagent-batches/${bigA}/results.jsonl`]) {
      const third = await fetch(`${server.origin}${path}`, { headers: auth() });
      expect(third.status, path).toBe(429);
      expect(((await third.json()) as { error: { code: string } }).error.code).toBe("too_many_exports");
    }
    // Both are cut at max_seconds (neither client reads): the slots are free again.
    for (const d of held) {
      d.readAll();
      expect((await d.closed).complete).toBe(false);
    }
    const after = await fetch(`${server.origin}${csvPath(bigA, bigB, "?change=regressed")}`, { headers: auth() });
    expect(after.status).toBe(200);
    expect((await after.text()).trim().split("\r\n")).toHaveLength(1);
  });

  it("holds its snapshot and connection at most exports.max_seconds, for a client that never reads", async () => {
    const started = Date.now();
    const download = rawDownload(server.port, csvPath(bigA, bigB), auth());
    expect(await download.status).toBe(200);
    expect(await heldSnapshots()).toBe(1);
    // Let go at max_seconds, long before the front door's 30 s stall timer would cut this client.
    while ((await heldSnapshots()) > 0 && Date.now() - started < MAX_SECONDS * 1000 + 5_000) await sleep(50);
    const released = Date.now() - started;
    expect(await heldSnapshots(), "still holding its snapshot 5 s after exports.max_seconds").toBe(0);
    expect(released).toBeGreaterThanOrEqual(MAX_SECONDS * 1000 - 100);
    // Its connection is gone too: what the client had received arrives, then the end of a cut response.
    download.readAll();
    const end = await Promise.race([download.closed, sleep(5_000).then(() => null)]);
    expect(end, "the connection was still open").not.toBeNull();
    expect(end!.complete).toBe(false);
  });
});

describe("a compare.csv page's cost", () => {
  /** Rows PostgreSQL read from the items table (sequential and by index), as its statistics have them. */
  async function rowsRead(): Promise<number> {
    const [row] = await tdb.sql<{ n: string }[]>`
      select (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::text as n from pg_stat_user_tables where relname = 'subagent_batch_items'`;
    return Number(row!.n);
  }

  it("does not grow with the other batch: 500 pairs against 100,000 items read about the pairs' rows", async () => {
    const small = await submit(Array.from({ length: 500 }, (_, i) => `item ${i}`));
    const huge = await submit(["item 0"]);
    // 100,000 items keyed item-1 .. item-100000 (written directly: a submission of that size is not what this tests).
    await tdb.sql`
      insert into subagent_batch_items (batch_id, position, item_key, prompt, input, status, result, started_at, finished_at)
      select ${huge}::uuid, g, 'item-' || g, 'p', 'item ' || g, 'succeeded', 'yes', now(), now() from generate_series(2, 100000) g`;
    await tdb.sql`update subagent_batch_items set status = 'succeeded', result = 'no' where batch_id in (${small}, ${huge}) and position = 1`;
    await tdb.sql`analyze subagent_batch_items`;
    // Each session reports what it read once idle, at most ~10 s later: start from a quiet figure.
    let before = await rowsRead();
    for (let quietSince = Date.now(), until = Date.now() + 40_000; Date.now() - quietSince < 11_000 && Date.now() < until; ) {
      await sleep(500);
      const now = await rowsRead();
      if (now !== before) [before, quietSince] = [now, Date.now()];
    }
    const res = await fetch(`${server.origin}${csvPath(small, huge)}`, { headers: auth() });
    expect(res.status).toBe(200);
    const parsed = Papa.parse<string[]>(await res.text(), { skipEmptyLines: true });
    expect(parsed.data).toHaveLength(1 + 500);
    // The export's one transaction is reported at once: wait until a's 500 rows at least are counted.
    const deadline = Date.now() + 20_000;
    let read = (await rowsRead()) - before;
    while (read < 500 && Date.now() < deadline) {
      await sleep(250);
      read = (await rowsRead()) - before;
    }
    await sleep(1_500);
    read = (await rowsRead()) - before;
    expect(read).toBeGreaterThanOrEqual(500);
    // a's 500 rows and b's 500 matches, with room to spare; hashing b would read its 100,000.
    expect(read).toBeLessThan(5_000);
  }, 90_000);
});

describe("compare.csv cells", () => {
  /** Formulas a spreadsheet evaluates: the minus sign U+2212, and = + - @ behind invisible format characters. */
  const HIDDEN = ["\u22121+1", " \u2212A1", "\u00ad=1+1", "\u2060+1", "\u200b\u200d@SUM(A1)", "\ufeff=1", "\u200e-1", "\u00a0\u00ad\u2060=cmd()", "\u{e0041}=1"];
  const HARMLESS = ["\u200fשלום", "\u00adtext", "a\u2212b", "plain"];

  it("guards formulas behind the minus sign and format characters, and leaves other text alone", async () => {
    const cells = [...HIDDEN, ...HARMLESS];
    const items = cells.map((c, i) => ({ item_key: `c${i}`, cell: c }));
    const a = await submit(items, { prompt_template: "Say {{cell}}" });
    const b = await submit(items, { prompt_template: "Say {{cell}}" });
    for (const id of [a, b])
      for (const [i, c] of cells.entries())
        await tdb.sql`update subagent_batch_items set status = 'succeeded', result = ${c}, started_at = now(), finished_at = now() where batch_id = ${id} and position = ${i + 1}`;
    const res = await fetch(`${server.origin}${csvPath(a, b)}`, { headers: auth() });
    expect(res.status).toBe(200);
    const parsed = Papa.parse<string[]>(await res.text(), { skipEmptyLines: true });
    expect(parsed.errors).toEqual([]);
    const [header, ...rows] = parsed.data as [string[], ...string[][]];
    const column = (name: string) => header.indexOf(name);
    expect(rows).toHaveLength(cells.length);
    for (const [i, c] of cells.entries()) {
      const want = i < HIDDEN.length ? `'${c}` : c;
      expect(rows[i]![column("a.output")], JSON.stringify(c)).toBe(want);
      expect(rows[i]![column("b.output")], JSON.stringify(c)).toBe(want);
    }
  });
});
