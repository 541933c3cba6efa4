import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as metricsRoute from "@/app/api/metrics/route";
import { catalogEndpointKey } from "@/server/runtime/rate-limit";
import { buildRequest, call, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { freePort, startWorkerProcess, stopAllWorkerProcesses, submit, waitForBatch } from "./support";

/**
 * Metric names and values after a small batch: scraped over HTTP from a real worker process's
 * metrics port, and from the web route handler (which also streamed the JSONL export).
 */

const ITEMS = 5;

/** The value of one sample in Prometheus text, matched by name and (a subset of) labels. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3]);
  }
  return undefined;
}

let t: TestDatabase;
let user: TestUser;
let threadId: string;
let batchId: string;
let workerMetrics: string;
let port: number;

beforeAll(async () => {
  t = await setupApiDatabase();
  user = await makeUser(t, "metrics");
  port = await freePort([3241, 3242, 3243, 3244, 3245]);
  await startWorkerProcess({
    databaseUrl: t.url,
    env: { FLOTILLA__METRICS__WORKER_PORT: String(port), FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "8" },
  });
  const { createThread } = await import("@/server/chat/threads");
  threadId = (await createThread(t.db, { userId: user.userId, title: "metrics" })).id;
  const batch = await submit(
    t.db,
    { userId: user.userId, threadId },
    Array.from({ length: ITEMS }, (_, i) => `metric item ${i + 1}`),
    { maxRunning: 8 },
  );
  batchId = batch.id;
  expect(await waitForBatch(t.db, batchId, 60_000)).toMatchObject({ succeeded: ITEMS });
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/plain");
  workerMetrics = await res.text();
}, 120_000);

afterAll(async () => {
  await stopAllWorkerProcesses();
  delete process.env.FLOTILLA_METRICS_TOKEN;
});

describe("worker metrics port", () => {
  it("reports claims, attempts, model calls and tokens of the batch it ran", () => {
    const m = workerMetrics;
    expect(sample(m, "flotilla_info", { role: "worker" })).toBe(1);
    expect(sample(m, "flotilla_batch_claims_total")).toBe(ITEMS);
    expect(sample(m, "flotilla_batch_attempts_total", { outcome: "succeeded" })).toBe(ITEMS);
    expect(sample(m, "flotilla_batch_lease_recoveries_total")).toBe(0);
    expect(sample(m, "flotilla_rate_limit_deferrals_total")).toBeUndefined(); // no sample until one happens
    // Endpoints are keyed by catalog entry (base URL + model id); the simulator has no base URL.
    const endpoint = catalogEndpointKey({ model: "simulator" });
    const calls = { endpoint, outcome: "ok" };
    expect(sample(m, "flotilla_model_call_duration_seconds_count", calls)).toBe(ITEMS);
    expect(sample(m, "flotilla_model_call_duration_seconds_sum", calls)).toBeGreaterThan(0);
    expect(sample(m, "flotilla_model_tokens_total", { endpoint, direction: "input" })).toBeGreaterThan(0);
    expect(sample(m, "flotilla_model_tokens_total", { endpoint, direction: "output" })).toBeGreaterThan(0);
    expect(sample(m, "flotilla_capacity_max_running")).toBe(8);
    expect(sample(m, "flotilla_capacity_running")).toBe(0);
    expect(sample(m, "flotilla_capacity_queued")).toBe(0);
    // Cluster-wide gauges from the per-batch counters.
    expect(sample(m, "flotilla_batch_items", { status: "succeeded" })).toBe(ITEMS);
    expect(sample(m, "flotilla_batch_items", { status: "queued" })).toBe(0);
    expect(sample(m, "flotilla_batches", { status: "completed" })).toBe(1);
    expect(sample(m, "flotilla_workers_alive")).toBe(1);
    expect(sample(m, "flotilla_metrics_database_up")).toBe(1);
    expect(sample(m, "process_cpu_user_seconds_total")).toBeGreaterThan(0);
  });

  it("answers 404 off the metrics path", async () => {
    expect((await fetch(`http://127.0.0.1:${port}/other`)).status).toBe(404);
  });
});

describe("GET /api/metrics (web)", () => {
  const get = (authorization?: string) =>
    metricsRoute.GET(
      buildRequest("GET", new URL("http://flotilla.test/api/metrics"), {
        headers: authorization ? { authorization } : {},
      }),
      undefined as never,
    );

  it("needs a signed-in user or API token when no metrics token is configured", async () => {
    const anonymous = await get();
    expect(anonymous.status).toBe(401);
    expect((await anonymous.json()).error.code).toBe("unauthorized");
    expect((await get(`Bearer ${user.token}`)).status).toBe(200);
  });

  it("reports the export bytes it streamed and the cluster gauges", async () => {
    const exported = await call("GET", `/api/threads/${threadId}/subagent-batches/${batchId}/results.jsonl`, {
      token: user.token,
    });
    expect(exported.status).toBe(200);
    const bytes = new TextEncoder().encode(await exported.text()).byteLength;
    expect(bytes).toBeGreaterThan(0);
    const res = await get(`Bearer ${user.token}`);
    expect(res.headers.get("content-type")).toContain("text/plain");
    const m = await res.text();
    expect(sample(m, "flotilla_info", { role: "web" })).toBe(1);
    expect(sample(m, "flotilla_export_bytes_total")).toBe(bytes);
    expect(sample(m, "flotilla_batch_items", { status: "succeeded" })).toBe(ITEMS);
    expect(sample(m, "flotilla_batch_claims_total")).toBe(0); // this process claimed nothing
  });

  it("with FLOTILLA_METRICS_TOKEN set, accepts only that token", async () => {
    process.env.FLOTILLA_METRICS_TOKEN = "scrape-secret-123";
    try {
      expect((await get(`Bearer ${user.token}`)).status).toBe(401);
      expect((await get("Bearer wrong-secret-123")).status).toBe(401);
      expect((await get("Bearer scrape-secret-123")).status).toBe(200);
    } finally {
      delete process.env.FLOTILLA_METRICS_TOKEN;
    }
  });
});

describe("worker metrics port with a token", () => {
  it("refuses scrapes without the bearer token", async () => {
    const { startMetricsServer } = await import("@/server/metrics");
    const p = await freePort([3246, 3247, 3248, 3249]);
    const server = await startMetricsServer({ port: p, env: { FLOTILLA_METRICS_TOKEN: "tok-abc" } });
    try {
      expect((await fetch(`http://127.0.0.1:${p}/metrics`)).status).toBe(401);
      expect((await fetch(`http://127.0.0.1:${p}/metrics`, { headers: { authorization: "Bearer nope" } })).status).toBe(401);
      const ok = await fetch(`http://127.0.0.1:${p}/metrics`, { headers: { authorization: "Bearer tok-abc" } });
      expect(ok.status).toBe(200);
      expect(await ok.text()).toContain("flotilla_info");
    } finally {
      await server.close();
    }
  });
});
