import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportPool } from "@/server/http/export";
import { putFile } from "@/server/workspace/files";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { rawDownload } from "../helpers/raw-download";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * A cut download resets its connection, whichever cut it is (exports.max_seconds of results.jsonl,
 * results.csv and compare.csv, or the front
 * door's stalled-reader timer for a file): a client that never reads leaves nothing queued in the
 * server's kernel after the cut (a graceful close kept megabytes and the FIN behind them in
 * FIN-WAIT-1 for as long as the client held on, the client's side ESTABLISHED), and the
 * client's socket is reset (ECONNRESET), never told that the response ended.
 */

const MAX_SECONDS = 2;
const STALL_MS = 1_500;
process.env.FLOTILLA__EXPORTS__MAX_SECONDS = String(MAX_SECONDS);

const tdb = await setupApiDatabase();
let server: WebServer;
let user: TestUser;
let threadId: string;
let batchId: string;
/** 5,000 items of 2,000 characters: its comparison with itself is about 20 MB of pairs. */
let compareBatch: string;
const FILE_BYTES = 24 * 1024 * 1024;

beforeAll(async () => {
  server = await startWebServer({
    stalledReaderMs: STALL_MS,
    preload: ["/api/threads/[threadId]/subagent-batches/[batchId]/results.jsonl", "/api/threads/[threadId]/files/[...path]"],
  });
  user = await makeUser(tdb, "reset");
  threadId = await makeThread(tdb, user);
  await workerAlive(tdb);
  const res = await fetch(`${server.origin}/api/threads/${threadId}/subagent-batches`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify({ submission_key: "reset", items: Array.from({ length: 200 }, (_, i) => `item ${i}`) }),
  });
  expect(res.status).toBe(201);
  batchId = ((await res.json()) as { id: string }).id;
  // 20 MB of results: far more than the kernel's buffers hold for a client that never reads.
  await tdb.sql`update subagent_batch_items set status = 'succeeded', result = repeat('r', 100000) where batch_id = ${batchId}`;
  const many = await fetch(`${server.origin}/api/threads/${threadId}/subagent-batches`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify({ submission_key: "reset-compare", items: Array.from({ length: 5_000 }, (_, i) => `item ${i}`) }),
  });
  expect(many.status).toBe(201);
  compareBatch = ((await many.json()) as { id: string }).id;
  await tdb.sql`update subagent_batch_items set status = 'succeeded', result = repeat('c', 2000) where batch_id = ${compareBatch}`;
  const limits = { maxFileBytes: FILE_BYTES, maxThreadBytes: FILE_BYTES, maxStorageBytes: FILE_BYTES };
  await putFile(tdb.db, { userId: user.userId, threadId, limits }, { path: "big.bin", bytes: Buffer.alloc(FILE_BYTES, 120), contentType: "application/octet-stream" });
});

afterAll(async () => {
  await server.close();
  await exportPool().end({ timeout: 5 });
});

/** One end of a loopback connection as the kernel has it (state, bytes still queued to send), or null once gone. */
function socketState(localPort: number, remotePort: number): { state: string; queued: number } | null {
  const hex = (n: number) => n.toString(16).toUpperCase().padStart(4, "0");
  // tcp6 too: a server listening on :: holds IPv4 peers there.
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"])
    for (const line of readFileSync(file, "utf8").split("\n").slice(1)) {
      const [, local, remote, state, queues] = line.trim().split(/\s+/);
      if (local?.endsWith(`:${hex(localPort)}`) && remote?.endsWith(`:${hex(remotePort)}`))
        return { state: state!, queued: Number.parseInt(queues!.split(":")[0]!, 16) };
    }
  return null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const downloads = {
  "results.jsonl (exports.max_seconds)": () => `/api/threads/${threadId}/subagent-batches/${batchId}/results.jsonl`,
  "results.csv (exports.max_seconds)": () => `/api/threads/${threadId}/subagent-batches/${batchId}/results.csv`,
  "compare.csv (exports.max_seconds)": () => `/api/threads/${threadId}/subagent-batches/${compareBatch}/compare/${compareBatch}/compare.csv`,
  "a file (the stalled-reader timer)": () => `/api/threads/${threadId}/files/big.bin`,
};

describe("a cut download's connection is reset", () => {
  for (const [name, path] of Object.entries(downloads))
    it(`${name}: nothing stays queued in the server's kernel, and the client's socket is reset`, async () => {
      const download = rawDownload(server.port, path(), { authorization: `Bearer ${user.token}` });
      expect(await download.status).toBe(200);
      const port = download.localPort()!;
      const serverSide = () => socketState(server.port, port);
      const clientSide = () => socketState(port, server.port);
      // Established, with the client reading nothing, until the cut.
      expect(serverSide()?.state).toBe("01");
      const started = Date.now();
      while (serverSide()?.state === "01" && Date.now() - started < 15_000) await sleep(50);
      expect(serverSide()?.state, "the server never cut the download").not.toBe("01");
      await sleep(200);
      // A graceful close leaves the server's side in FIN-WAIT-1 with megabytes queued, and the
      // client's ESTABLISHED (the FIN waits behind them); a reset ends both at once.
      expect(serverSide(), "the server's side still holds the connection after the cut").toBeNull();
      expect(clientSide(), "the client's side was not reset").toBeNull();
      // It reads what its kernel had received, then learns the response was cut, not ended.
      // (Node reports the reset as ECONNRESET only when no data is pending: libuv turns the
      // hang-up behind buffered data into an end; the kernel state above is the reset itself.)
      download.readAll();
      const end = await download.closed;
      expect(end.complete).toBe(false);
    });
});
