import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { multipartBody } from "../helpers/multipart";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * Over real sockets: ten clients trickle request bodies (workspace uploads, /v1 files, batch
 * submissions) at a pace the front door accepts, for about ten seconds each. Meanwhile no
 * connection of the web pool is busy on their behalf, /api/health answers under a second and
 * a sign-in succeeds within five; then every upload completes.
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let user: TestUser;
let threadId: string;

beforeAll(async () => {
  server = await startWebServer();
  user = await makeUser(tdb, "trickle");
  threadId = await makeThread(tdb, user);
  await workerAlive(tdb);
  // Load the route modules before the clock starts.
  await send(server, "/api/health");
  await send(server, `/api/threads/${threadId}/files`, { headers: { authorization: `Bearer ${user.token}` } });
});

afterAll(() => server.close());

/** A POST whose head goes at once and whose body follows in 1.5 KiB slices, one a second. */
function trickle(path: string, contentType: string, body: Buffer, from: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port: server.port, localAddress: from });
    let response = "";
    let offset = 0;
    let timer: NodeJS.Timeout | undefined;
    socket.on("connect", () => {
      socket.write(
        `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\nauthorization: Bearer ${user.token}\r\n` +
          `content-type: ${contentType}\r\ncontent-length: ${body.length}\r\n\r\n`,
      );
      timer = setInterval(() => {
        if (offset >= body.length) return clearInterval(timer);
        socket.write(body.subarray(offset, offset + 1536));
        offset += 1536;
      }, 1000);
    });
    socket.on("data", (chunk) => {
      response += chunk.toString("utf8");
    });
    socket.on("error", reject);
    socket.on("close", () => {
      clearInterval(timer);
      resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0));
    });
  });
}

async function busyWebConnections(): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where datname = current_database() and application_name = 'flotilla-web' and state <> 'idle'`;
  return row!.n;
}

async function signIn(): Promise<number> {
  const from = "127.0.0.40";
  const csrf = await send(server, "/api/auth/csrf", { from });
  const { csrfToken } = JSON.parse(csrf.body) as { csrfToken: string };
  const cookie = (csrf.headers["set-cookie"] ?? []).map((c) => c.split(";")[0]).join("; ");
  const res = await send(server, "/api/auth/callback/credentials", {
    from,
    timeoutMs: 5_000,
    headers: { "content-type": "application/x-www-form-urlencoded", cookie },
    body: new URLSearchParams({ csrfToken, email: user.email, password: "correct horse battery", json: "true" }).toString(),
  });
  expect((res.headers["set-cookie"] ?? []).some((c) => c.startsWith("next-auth.session-token="))).toBe(true);
  return res.status;
}

describe("ten trickling uploads hold no connection", () => {
  it("workspace files, /v1 files and batch submissions: health under 1 s, sign-in within 5 s, no busy web connection", { timeout: 60_000 }, async () => {
    const size = 14 * 1024; // about ten seconds each at 1.5 KiB/s
    const uploads: Promise<number>[] = [];
    for (let i = 0; i < 4; i++) {
      const { body, contentType } = multipartBody([{ filename: `slow-${i}.txt`, content: "w".repeat(size) }]);
      uploads.push(trickle(`/api/threads/${threadId}/files`, contentType, body, `127.0.0.${20 + i}`));
    }
    for (let i = 0; i < 3; i++) {
      const line = `{"custom_id":"r${i}","pad":"${"v".repeat(size)}"}\n`;
      const { body, contentType } = multipartBody([
        { filename: `slow-${i}.jsonl`, content: line, type: "application/jsonl" },
        { name: "purpose", content: "batch" },
      ]);
      uploads.push(trickle("/v1/files", contentType, body, `127.0.0.${24 + i}`));
    }
    for (let i = 0; i < 3; i++) {
      const json = JSON.stringify({ submission_key: `trickle-${i}`, items: Array.from({ length: 40 }, (_, k) => `item ${k} ${"s".repeat(300)}`) });
      uploads.push(trickle(`/api/threads/${threadId}/subagent-batches`, "application/json", Buffer.from(json), `127.0.0.${27 + i}`));
    }

    await new Promise((r) => setTimeout(r, 2_000)); // every client has sent its head and is trickling
    const busy: number[] = [];
    const healthMs: number[] = [];
    for (let round = 0; round < 8; round++) {
      busy.push(await busyWebConnections());
      const started = Date.now();
      const health = await send(server, "/api/health", { timeoutMs: 5_000 });
      expect(health.status).toBe(200);
      healthMs.push(Date.now() - started);
      await new Promise((r) => setTimeout(r, 400));
    }
    const signInStarted = Date.now();
    expect(await signIn()).toBe(200);
    const signInMs = Date.now() - signInStarted;

    expect(busy).toEqual(busy.map(() => 0));
    expect(Math.max(...healthMs)).toBeLessThan(1_000);
    expect(signInMs).toBeLessThan(5_000);
    expect(await Promise.all(uploads)).toEqual([201, 201, 201, 201, 200, 200, 200, 201, 201, 201]);
  });
});
