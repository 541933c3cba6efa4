import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as health from "@/app/api/health/route";
import { compileGlob } from "@/lib/glob";
import { call, makeThread, makeUser, rowCounts, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";

/**
 * Bounds before work, measured over real HTTP against the route handlers in this process (the
 * web process's one thread): a glob that made the old backtracking matcher run for seconds (or
 * days) answers within a second, a 20,000-character template over 5,000 files is refused with
 * 413 before a single prompt is built, and /api/health, timed concurrently, answers within a
 * second throughout.
 */

let tdb: TestDatabase;
let alice: TestUser;
let server: http.Server;
let origin = "";

beforeAll(async () => {
  tdb = await setupApiDatabase();
  alice = await makeUser(tdb, "bounds");
  server = http.createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const headers: Record<string, string> = {};
      for (const name of ["authorization", "content-type"]) if (req.headers[name]) headers[name] = String(req.headers[name]);
      const response =
        req.url === "/api/health"
          ? await health.GET()
          : await call(req.method ?? "GET", req.url ?? "/", { headers, ...(chunks.length ? { body: Buffer.concat(chunks) } : {}) });
      res.writeHead(response.status, { "content-type": response.headers.get("content-type") ?? "application/json" });
      res.end(Buffer.from(await response.arrayBuffer()));
    })().catch((err) => res.writeHead(500).end(String(err)));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

/** Files straight into the workspace table (set-up only; the route reads them as uploads). */
async function addFiles(threadId: string, paths: string[]): Promise<void> {
  await tdb.sql`
    insert into workspace_files (user_id, thread_id, path, bytes, size, sha256, content_type)
    select ${alice.userId}::uuid, ${threadId}::uuid, p, convert_to(p, 'UTF8'), octet_length(p),
           encode(sha256(convert_to(p, 'UTF8')), 'hex'), 'text/plain'
      from unnest(${paths}::text[]) as p`;
}

/** Runs `work` while /api/health is requested over HTTP every 25 ms; returns its result and the slowest health answer. */
async function withHealthProbe<T>(work: () => Promise<T>): Promise<{ result: T; slowestHealthMs: number; probes: number }> {
  let stop = false;
  let slowest = 0;
  let probes = 0;
  const probe = (async () => {
    while (!stop) {
      const started = performance.now();
      const res = await fetch(`${origin}/api/health`);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      slowest = Math.max(slowest, performance.now() - started);
      probes++;
      await new Promise((r) => setTimeout(r, 25));
    }
  })();
  await new Promise((r) => setTimeout(r, 50));
  try {
    const result = await work();
    return { result, slowestHealthMs: slowest, probes };
  } finally {
    stop = true;
    await probe;
  }
}

async function submit(threadId: string, body: unknown): Promise<{ status: number; body: { error?: { code: string; message: string } }; ms: number }> {
  const started = performance.now();
  const res = await fetch(`${origin}/api/threads/${threadId}/subagent-batches`, {
    method: "POST",
    headers: { authorization: `Bearer ${alice.token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const parsed = (await res.json()) as { error?: { code: string; message: string } };
  return { status: res.status, body: parsed, ms: performance.now() - started };
}

describe("a files glob is matched in time linear in the path", () => {
  const names = ["a".repeat(100), "a".repeat(200), `${"a".repeat(150)}/${"a".repeat(150)}`];
  const globs = [
    ["*a*a*a*a*a*b (9.4 s per 100-character name before)", "*a*a*a*a*a*b"],
    ["seven stars over 200-character names (days before)", "*a*a*a*a*a*a*a*b"],
    ["a 512-character glob", "*a".repeat(256)],
    ["a 512-character glob of globstars and classes", `**/${"[ab]*".repeat(101)}b`.slice(0, 512)],
  ] as const;

  it.each(globs)("%s answers within a second while /api/health stays under a second", async (_name, glob) => {
    expect(glob.length).toBeLessThanOrEqual(512);
    const threadId = await makeThread(tdb, alice);
    await addFiles(threadId, names);
    const before = await rowCounts(tdb);
    const { result, slowestHealthMs, probes } = await withHealthProbe(() =>
      submit(threadId, { submission_key: `glob-${Math.random()}`, files: glob, prompt_template: "Read {{file}}" }),
    );
    console.info(`glob ${glob.slice(0, 24)}… (${glob.length} chars): ${result.ms.toFixed(0)} ms; slowest health ${slowestHealthMs.toFixed(0)} ms over ${probes} probes`);
    expect(result.status).toBe(400);
    expect(result.body.error?.message).toContain("matches no file");
    expect(result.ms).toBeLessThan(1_000);
    expect(slowestHealthMs).toBeLessThan(1_000);
    expect(await rowCounts(tdb)).toEqual(before);
  });

  it("a 510-character glob of groups that never close is refused within a second", async () => {
    const threadId = await makeThread(tdb, alice);
    await addFiles(threadId, names);
    const { result, slowestHealthMs } = await withHealthProbe(() =>
      submit(threadId, { submission_key: `nested-${Math.random()}`, files: "{a,".repeat(170), prompt_template: "{{file}}" }),
    );
    expect(result.status).toBe(400);
    expect(result.body.error?.message).toMatch(/^files: the glob is too complex/);
    expect(result.ms).toBeLessThan(1_000);
    expect(slowestHealthMs).toBeLessThan(1_000);
  });

  it("the matcher alone: each glob against 1,000 names of 200 characters in well under a second", () => {
    const many = Array.from({ length: 1_000 }, (_, i) => `${"a".repeat(195)}${String(i).padStart(5, "0")}`);
    for (const [, glob] of globs) {
      const started = performance.now();
      const isMatch = compileGlob(glob);
      expect(many.some((p) => isMatch(p))).toBe(false);
      expect(performance.now() - started).toBeLessThan(1_000);
    }
  });
});

describe("the expanded prompt total is bounded before anything is expanded", () => {
  // 20,000 characters holding {{file}} 2,000 times: over 5,000 paths of 40 characters each prompt
  // would be 84,000 characters (under the per-item 100,000) and the batch 420,000,000 in all.
  const template = `${"{{file}}".repeat(2_000)}${"y".repeat(4_000)}`;
  const paths = Array.from({ length: 5_000 }, (_, i) => `data/${String(i).padStart(6, "0")}-${"x".repeat(24)}.txt`);

  it("20,000-character template × 5,000 paths: 413 quickly, heap growth far below the expansion", async () => {
    expect(template.length).toBe(20_000);
    expect(paths[0]).toHaveLength(40);
    const threadId = await makeThread(tdb, alice);
    await addFiles(threadId, paths);
    const before = await rowCounts(tdb);
    // Warm the route (module state, connection pool) so the measurement is of this request alone.
    await submit(threadId, { submission_key: "warm", files: "none/*", prompt_template: "{{file}}" });

    for (const body of [
      { submission_key: "expand-files", files: "data/*", prompt_template: template },
      { submission_key: "expand-items", items: paths, prompt_template: template.replaceAll("{{file}}", "{{item}}") },
    ]) {
      let peak = process.memoryUsage().heapUsed;
      const baseline = peak;
      const sampler = setInterval(() => {
        peak = Math.max(peak, process.memoryUsage().heapUsed);
      }, 5);
      const { result, slowestHealthMs } = await withHealthProbe(() => submit(threadId, body));
      clearInterval(sampler);
      peak = Math.max(peak, process.memoryUsage().heapUsed);
      const growthMb = (peak - baseline) / 1024 / 1024;
      console.info(
        `${body.submission_key}: ${result.status} in ${result.ms.toFixed(0)} ms; heap growth ${growthMb.toFixed(1)} MB (expansion: 420,000,000 characters); slowest health ${slowestHealthMs.toFixed(0)} ms`,
      );
      expect(result.status).toBe(413);
      expect(result.body.error?.code).toBe("payload_too_large");
      // The items door knows the whole total; the files door stops counting at the first path past the limit.
      expect(result.body.error?.message).toMatch(/would total (420000000|more than 50000000) characters/);
      expect(result.ms).toBeLessThan(2_000);
      // Building the prompts needs at least 420 MB (one byte per character); the refusal a small fraction of that.
      expect(growthMb).toBeLessThan(64);
      expect(slowestHealthMs).toBeLessThan(1_000);
    }
    expect(await rowCounts(tdb)).toEqual(before);
  });
});
