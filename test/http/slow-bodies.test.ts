import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * Slow bodies at the front door, in real time (no shortened clock): a body slower than 1 KiB/s
 * over 30 s is answered 408 and its connection closed 30–40 s after its head, a body of the
 * same length that keeps pace is never cut, and while ten clients trickle, /api/health still
 * answers under a second. Everything runs at once, so the suite takes about 45 s.
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let user: TestUser;
let threadId: string;

interface Trickled {
  status: number;
  body: string;
  /** From the head being sent to the answer's first byte, and to the connection closing. */
  answeredAfterMs: number;
  closedAfterMs: number;
}

/** Sends a head at once, then `body` in slices of `slice` bytes every `everyMs`, over a raw socket. */
function trickle(path: string, head: Record<string, string>, body: Buffer, slice: number, everyMs: number, from = "127.0.0.1") {
  return new Promise<Trickled>((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port: server.port, localAddress: from });
    let sentAt = 0;
    let answeredAfterMs = -1;
    let response = "";
    let offset = 0;
    let timer: NodeJS.Timeout | undefined;
    socket.on("connect", () => {
      const lines = Object.entries({ host: "127.0.0.1", connection: "close", ...head }).map(([k, v]) => `${k}: ${v}`);
      socket.write(`POST ${path} HTTP/1.1\r\n${lines.join("\r\n")}\r\n\r\n`);
      sentAt = Date.now();
      timer = setInterval(() => {
        if (offset >= body.length || socket.destroyed) return clearInterval(timer);
        socket.write(body.subarray(offset, offset + slice));
        offset += slice;
      }, everyMs);
    });
    socket.on("data", (chunk) => {
      if (answeredAfterMs < 0) answeredAfterMs = Date.now() - sentAt;
      response += chunk.toString("utf8");
    });
    socket.on("error", () => {}); // a write after the server closed: the close below tells the story
    socket.on("close", () => {
      clearInterval(timer);
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0);
      if (!status) return reject(new Error(`no answer (closed after ${Date.now() - sentAt} ms)`));
      const split = response.indexOf("\r\n\r\n");
      const head = response.slice(0, split);
      const raw = response.slice(split + 4);
      const body = /^transfer-encoding: chunked$/im.test(head) ? dechunk(raw) : raw;
      resolve({ status, body, answeredAfterMs, closedAfterMs: Date.now() - sentAt });
    });
  });
}

function dechunk(raw: string): string {
  let out = "";
  let rest = raw;
  for (;;) {
    const eol = rest.indexOf("\r\n");
    const size = Number.parseInt(rest.slice(0, eol), 16);
    if (!(size > 0)) return out;
    out += rest.slice(eol + 2, eol + 2 + size);
    rest = rest.slice(eol + 2 + size + 2);
  }
}

function multipart(path: string, size: number): { body: Buffer; contentType: string } {
  const boundary = "----flotilla-slow-body";
  const body = Buffer.concat([
    Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="${path}"\r\ncontent-type: text/plain\r\n\r\n`),
    Buffer.alloc(size, "a"),
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  return { body, contentType: `multipart/form-data; boundary=${boundary}` };
}

let slowUpload: Promise<Trickled>;
let steadyUpload: Promise<Trickled>;
let slowSignIns: Promise<Trickled[]>;
let healthTimes: Promise<number[]>;

beforeAll(async () => {
  server = await startWebServer();
  user = await makeUser(tdb, "slow");
  threadId = await makeThread(tdb, user);
  await send(server, "/api/health"); // loads the route module before the clock starts
  const upload = (name: string) => {
    const { body, contentType } = multipart(name, 60 * 1024);
    return {
      body,
      head: { authorization: `Bearer ${user.token}`, "content-type": contentType, "content-length": String(body.length) },
    };
  };
  const slow = upload("slow.txt");
  const steady = upload("steady.txt");
  const path = `/api/threads/${threadId}/files`;
  // The same 60 KiB: 100 bytes a second (cut), and 1.5 KiB a second (about 40 s, kept).
  slowUpload = trickle(path, slow.head, slow.body, 100, 1_000);
  steadyUpload = trickle(path, steady.head, steady.body, 1_536, 1_000);
  // Ten sign-ins, each a few bytes a second, from ten addresses; half without a length (chunked).
  const form = Buffer.from(`email=${encodeURIComponent(user.email)}&password=${"p".repeat(4_000)}`);
  slowSignIns = Promise.all(
    Array.from({ length: 10 }, (_, i) => {
      const head: Record<string, string> = { "content-type": "application/x-www-form-urlencoded" };
      if (i % 2 === 0) head["content-length"] = String(form.length);
      else head["transfer-encoding"] = "chunked";
      const body = i % 2 === 0 ? form : Buffer.from(`${form.length.toString(16)}\r\n${form}\r\n0\r\n\r\n`);
      return trickle("/api/auth/callback/credentials", head, body, 20, 1_000, `127.0.0.${10 + i}`);
    }),
  );
  healthTimes = (async () => {
    const times: number[] = [];
    const until = Date.now() + 32_000;
    while (Date.now() < until) {
      const started = Date.now();
      const res = await send(server, "/api/health", { timeoutMs: 5_000 });
      expect(res.status).toBe(200);
      times.push(Date.now() - started);
      await new Promise((r) => setTimeout(r, 500));
    }
    return times;
  })();
}, 60_000);

afterAll(() => server.close());

describe("slow request bodies", () => {
  it("answers 408 to an upload slower than 1 KiB/s and closes it 30–40 s after its head", { timeout: 60_000 }, async () => {
    const slow = await slowUpload;
    expect(slow.status).toBe(408);
    expect(JSON.parse(slow.body).error.code).toBe("request_timeout");
    expect(slow.answeredAfterMs).toBeGreaterThanOrEqual(30_000);
    expect(slow.closedAfterMs).toBeLessThanOrEqual(40_000);
    // Nothing of the cut upload was stored.
    const files = JSON.parse((await send(server, `/api/threads/${threadId}/files`, { headers: { authorization: `Bearer ${user.token}` } })).body);
    expect(files.files.map((f: { path: string }) => f.path)).not.toContain("slow.txt");
  });

  it("never cuts an upload of the same length that keeps pace, though it takes longer than 30 s", { timeout: 60_000 }, async () => {
    const steady = await steadyUpload;
    expect(steady.status).toBe(201);
    expect(steady.answeredAfterMs).toBeGreaterThan(35_000);
    expect(JSON.parse(steady.body).files.map((f: { path: string }) => f.path)).toEqual(["steady.txt"]);
  });

  it("cuts ten trickling sign-ins (with and without a length) while /api/health answers under 1 s", { timeout: 60_000 }, async () => {
    for (const signIn of await slowSignIns) {
      expect(signIn.status).toBe(408);
      expect(signIn.answeredAfterMs).toBeGreaterThanOrEqual(30_000);
      expect(signIn.closedAfterMs).toBeLessThanOrEqual(40_000);
    }
    const times = await healthTimes;
    expect(times.length).toBeGreaterThan(20);
    expect(Math.max(...times)).toBeLessThan(1_000);
  });
});
