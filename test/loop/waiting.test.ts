import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import type { BatchProjection } from "@/lib/api/batches";
import { configureMetrics, renderMetrics } from "@/server/metrics";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { sleep } from "../batches/support";
import type { TestDatabase } from "../helpers/db";
import { call, getProjection, waitUntil, Workers } from "./support";

/**
 * Every waiting reason produced for real, with real worker processes: paused by the owner,
 * every slot of every live worker busy with another batch (capacity), a 429 storm from the
 * simulator (rate_limited with until), and every worker killed (no_worker). The same reasons
 * label the flotilla_batches_waiting gauge.
 */

// Short leases so a killed worker stops counting as alive within the 10 s liveness window.
process.env.FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS = "2";
const WORKER_ENV = { FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "1", FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: "2" };

let t: TestDatabase;
const workers = new Workers();
let user: TestUser;
let threadId: string;

beforeAll(async () => {
  t = await setupApiDatabase();
  workers.use(t);
  user = await makeUser(t, "waiting");
  threadId = await makeThread(t, user);
  configureMetrics({ db: t.db });
  workers.spawn(WORKER_ENV);
  await workers.waitAlive(1);
});

async function submit(key: string, items: string[], extra: Record<string, unknown> = {}): Promise<BatchProjection> {
  const res = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
    token: user.token,
    json: { submission_key: key, items, ...extra },
  });
  expect(res.status, await res.clone().text()).toBe(201);
  return (await res.json()) as BatchProjection;
}

const until = (batchId: string, want: (p: BatchProjection) => boolean, label: string, timeoutMs = 30_000) =>
  waitUntil(
    label,
    async () => {
      const p = await getProjection(user.token, threadId, batchId);
      return want(p) ? p : undefined;
    },
    timeoutMs,
  );

async function waitingGauge(): Promise<Record<string, number>> {
  await sleep(300); // past the scrape snapshot's 250 ms reuse
  const { body } = await renderMetrics();
  const out: Record<string, number> = {};
  for (const m of body.matchAll(/^flotilla_batches_waiting\{reason="([a-z_]+)"\} (\d+)/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

describe("waiting_reason", () => {
  it("is null while items move, capacity when every live slot is busy with another batch, paused after pause", async () => {
    // The single slot of the only worker is taken by a long item of another batch.
    const hog = await submit("hog", ["hold the slot [[sleep:8000]]"]);
    await until(hog.id, (p) => p.counts.running === 1 && p.waiting_reason === null, "hog running, moving");
    const starved = await submit("starved", ["a [[sleep:10]]", "b [[sleep:10]]"]);
    const capacity = await until(starved.id, (p) => p.waiting_reason === "capacity", "capacity", 15_000);
    expect(capacity.status).toBe("queued");
    expect(capacity.eta).toBeNull();
    expect((await waitingGauge()).capacity).toBeGreaterThanOrEqual(1);

    const paused = await call("POST", `/api/threads/${threadId}/subagent-batches/${starved.id}/pause`, { token: user.token });
    expect(paused.status).toBe(200);
    expect(((await paused.json()) as BatchProjection).waiting_reason).toBe("paused");
    const p = await getProjection(user.token, threadId, starved.id);
    expect(p).toMatchObject({ waiting_reason: "paused", pause_reason: "user" });
    expect((await waitingGauge()).paused).toBe(1);
    await call("POST", `/api/threads/${threadId}/subagent-batches/${starved.id}/resume`, { token: user.token });
    await until(starved.id, (b) => b.status === "completed", "starved completes", 30_000);
    await until(hog.id, (b) => b.status === "completed", "hog completes", 30_000);
  }, 90_000);

  it("has an ETA from recent completions once enough items finished, and none before", async () => {
    const steady = await submit("steady", Array.from({ length: 30 }, (_, i) => `steady ${i} [[sleep:200]]`));
    const first = await getProjection(user.token, threadId, steady.id);
    expect(first.eta).toBeNull();
    const withEta = await until(steady.id, (p) => p.eta !== null, "eta", 20_000);
    const eta = withEta.eta!;
    expect(eta.finished_in_window).toBeGreaterThanOrEqual(3);
    expect(eta.remaining).toBe(30 - withEta.terminal);
    expect(eta.items_per_minute).toBeGreaterThan(0);
    // One slot, ~200 ms an item: a few items a second at most, so the ETA is seconds, not zero.
    expect(eta.items_per_minute).toBeLessThan(400);
    expect(eta.eta_seconds).toBeGreaterThan(0);
    expect(eta.eta_seconds).toBeLessThan(120);
    await call("POST", `/api/threads/${threadId}/subagent-batches/${steady.id}/pause`, { token: user.token });
    expect((await getProjection(user.token, threadId, steady.id)).eta).toBeNull();
  }, 60_000);

  it("is rate_limited with until during a 429 storm from the simulator", async () => {
    const storm = await submit("storm", Array.from({ length: 6 }, (_, i) => `storm ${i} [[429]]`), { max_running_items: 1 });
    const limited = await until(storm.id, (p) => p.waiting_reason === "rate_limited", "rate_limited", 20_000);
    expect(limited.waiting_until).not.toBeNull();
    expect(Number.isNaN(Date.parse(limited.waiting_until!))).toBe(false);
    expect(limited.eta).toBeNull();
    const [row] = await t.db.execute<{ n: number }>(sql`select rate_limited::int as n from model_rate_limits where endpoint = 'simulator|simulator'`);
    expect(row!.n).toBeGreaterThan(0);
    await call("POST", `/api/threads/${threadId}/subagent-batches/${storm.id}/pause`, { token: user.token });
  }, 60_000);

  it("is no_worker (since the last heartbeat) once every worker is killed", async () => {
    const orphan = await submit("orphan", ["never runs [[sleep:10]]"]);
    await workers.killAll();
    const [beat] = await t.db.execute<{ last: Date }>(sql`select max(last_heartbeat_at) as last from worker_heartbeats where kind = 'worker'`);
    const stalled = await until(orphan.id, (p) => p.waiting_reason === "no_worker", "no_worker", 30_000);
    expect(stalled.waiting_since).toBe(new Date(beat!.last).toISOString());
    expect((await waitingGauge()).no_worker).toBeGreaterThanOrEqual(1);
  }, 60_000);
});
