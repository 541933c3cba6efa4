import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BatchProjection } from "@/lib/api/batches";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { startWebServer, type WebServer } from "../helpers/web-server";
import { sleep } from "../batches/support";
import { waitUntil, Workers } from "./support";

/**
 * `pilot: N` over real HTTP with three real worker processes (12 slots in all, more than N):
 * the first N items run, the batch pauses with pause_reason "pilot", no item past position N is
 * ever leased before the person resumes (an audit trigger records every lease with the time,
 * in the database's clock), and resuming clears the pilot and runs the rest.
 */

let t: TestDatabase;
const workers = new Workers();
let server: WebServer;
let user: TestUser;
let threadId: string;

beforeAll(async () => {
  t = await setupApiDatabase();
  workers.use(t);
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches"] });
  user = await makeUser(t, "pilot");
  threadId = await makeThread(t, user);
  await t.db.execute(sql`create table lease_audit (batch_id uuid, position int, at timestamptz default clock_timestamp())`);
  await t.db.execute(
    sql.raw(`create function lease_audit_fn() returns trigger language plpgsql as $$
      begin
        insert into lease_audit (batch_id, position) select n.batch_id, n.position from new_items n where n.status = 'leased';
        return null;
      end $$`),
  );
  await t.db.execute(sql`create trigger lease_audit_trg after update on subagent_batch_items
    referencing new table as new_items for each statement execute function lease_audit_fn()`);
  for (let i = 0; i < 3; i++) workers.spawn({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4" });
  await workers.waitAlive(3);
});
afterAll(async () => {
  await server?.close();
});

const base = () => `/api/threads/${threadId}/subagent-batches`;

async function api(method: string, path: string, body?: unknown, contentType = "application/json") {
  const res = await fetch(`${server.origin}${path}`, {
    method,
    headers: { authorization: `Bearer ${user.token}`, ...(body === undefined ? {} : { "content-type": contentType }) },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const projection = async (batchId: string) => (await api("GET", `${base()}/${batchId}`)).body as unknown as BatchProjection;

async function leasedPastPilot(batchId: string, pilot: number, before?: string) {
  const [row] = await t.db.execute<{ n: number }>(sql`
    select count(*)::int as n from lease_audit
     where batch_id = ${batchId} and position > ${pilot} ${before ? sql`and at < ${before}::timestamptz` : sql``}`);
  return row!.n;
}

describe("pilot: N", () => {
  it("runs only the first N items with many free slots, pauses with pause_reason pilot, and resume runs the rest", async () => {
    const pilot = 5;
    const items = Array.from({ length: 40 }, (_, i) => `pilot item ${i + 1} [[sleep:150]]`);
    const created = await api("POST", base(), { submission_key: "pilot-1", items, pilot, max_running_items: 12, max_live_items: 40 });
    expect(created.status).toBe(201);
    const batchId = created.body.id as string;
    expect(created.body.pilot).toBe(pilot);

    const paused = await waitUntil(
      "the pilot pause with nothing in flight",
      async () => {
        const p = await projection(batchId);
        return p.status === "paused" && p.counts.leased + p.counts.running === 0 ? p : undefined;
      },
      60_000,
    );
    expect(paused).toMatchObject({ pause_reason: "pilot", pilot, waiting_reason: "paused" });
    expect(paused.counts.succeeded).toBe(pilot);
    expect(paused.counts.queued + paused.counts.pending).toBe(40 - pilot);

    // Twelve free slots and nothing else to do: still nothing past position N starts.
    await sleep(1_500);
    const still = await projection(batchId);
    expect(still.terminal).toBe(pilot);
    expect(still.status).toBe("paused");
    expect(await leasedPastPilot(batchId, pilot)).toBe(0);

    const [clock] = await t.db.execute<{ now: string }>(sql`select clock_timestamp()::text as now`);
    const now = clock!.now;
    const resumed = await api("POST", `${base()}/${batchId}/resume`);
    expect(resumed.status).toBe(200);
    expect(resumed.body).toMatchObject({ pilot: null, pause_reason: null });
    const done = await waitUntil(
      "the rest runs after resume",
      async () => {
        const p = await projection(batchId);
        return p.status === "completed" ? p : undefined;
      },
      90_000,
    );
    expect(done.counts.succeeded).toBe(40);
    expect(done.pilot).toBeNull();
    // Every item past N was leased only after the resume; the first N exactly once each.
    expect(await leasedPastPilot(batchId, pilot, now)).toBe(0);
    expect(await leasedPastPilot(batchId, pilot)).toBeGreaterThanOrEqual(40 - pilot);
    const [firstN] = await t.db.execute<{ n: number }>(
      sql`select count(*)::int as n from lease_audit where batch_id = ${batchId} and position <= ${pilot}`,
    );
    expect(firstN!.n).toBe(pilot);
  });

  it("a person's pause during the pilot keeps it: resuming after the pilot's items finished pauses at the pilot again", async () => {
    const items = Array.from({ length: 12 }, (_, i) => `manual ${i + 1} [[sleep:4000]]`);
    const created = await api("POST", base(), { submission_key: "pilot-2", items, pilot: 3, max_running_items: 6 });
    const batchId = created.body.id as string;
    await waitUntil("the pilot's items start", async () => ((await projection(batchId)).counts.running > 0 ? true : undefined), 30_000, 20);
    expect((await api("POST", `${base()}/${batchId}/pause`)).body).toMatchObject({ status: "paused", pause_reason: "user", pilot: 3 });
    await waitUntil("in-flight items finish", async () => {
      const p = await projection(batchId);
      return p.counts.leased + p.counts.running === 0 ? true : undefined;
    });
    const again = await api("POST", `${base()}/${batchId}/resume`);
    // Three finished by now (they were all in flight): the pilot is done, so the batch stays paused at it.
    const p = await waitUntil("paused at the pilot", async () => {
      const q = await projection(batchId);
      return q.status === "paused" && q.pause_reason === "pilot" ? q : undefined;
    });
    expect(again.status).toBe(200);
    expect(p.terminal).toBe(3);
    expect(await leasedPastPilot(batchId, 3)).toBe(0);
    const resumed = await api("POST", `${base()}/${batchId}/resume`);
    expect(resumed.body).toMatchObject({ pilot: null });
    await waitUntil("completed", async () => ((await projection(batchId)).status === "completed" ? true : undefined), 60_000);
  });

  it("refuses a bad pilot with a 400 naming it (JSON and CSV) and writes nothing; a pilot covering every item is no pilot", async () => {
    for (const bad of [0, 1001, 2.5, "3"]) {
      const r = await api("POST", base(), { submission_key: `bad-${String(bad)}`, items: ["a", "b"], pilot: bad });
      expect(r.status, String(bad)).toBe(400);
      expect((r.body.error as { message: string }).message).toMatch(/^pilot: /);
    }
    const csv = await api("POST", `${base()}?submission_key=csv-bad&pilot=0`, "q\nx\ny\n", "text/csv");
    expect(csv.status).toBe(400);
    expect((csv.body.error as { message: string }).message).toMatch(/^pilot: /);
    const [written] = await t.db.execute<{ n: number }>(
      sql`select count(*)::int as n from subagent_batches where submission_key like 'bad-%' or submission_key = 'csv-bad'`,
    );
    expect(written!.n).toBe(0);
    const ok = await api("POST", `${base()}?submission_key=csv-ok&pilot=1`, "prompt\nx [[sleep:10]]\ny [[sleep:10]]\n", "text/csv");
    expect(ok.status).toBe(201);
    expect(ok.body.pilot).toBe(1);
    const whole = await api("POST", base(), { submission_key: "whole", items: ["a", "b"], pilot: 2 });
    expect(whole.body.pilot).toBeNull();
  });
});
