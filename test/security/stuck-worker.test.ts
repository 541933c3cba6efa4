import { batchSubagent } from "@/server/agent/registry";
import { type ChildProcess, spawn } from "node:child_process";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { countLiveWorkers } from "@/server/runtime/heartbeat";
import { makeOwner, SIM_MODEL, sleep, testConfig } from "../batches/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/**
 * A worker whose passes keep failing does not hide it (DESIGN "Holding under abuse (third
 * round)"): from the first failed pass its heartbeat goes silent, so it no longer reads as alive,
 * and after 60 s of failures the process exits non-zero, which `npm start` answers by starting a
 * new one. Proven with a real worker process whose claims PostgreSQL refuses (a trigger).
 */

let t: TestDatabase;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  t = await createTestDatabase();
});

afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
});

/** A worker process as `npm start` runs one; `output()`: the end of its log (stdout and stderr). */
function spawnWorker(): { child: ChildProcess; exited: Promise<number | null>; output: () => string } {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")));
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    env: {
      ...base,
      DATABASE_URL: t.url,
      LOG_LEVEL: "error",
      NODE_ENV: "production",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.5",
      FLOTILLA__SIMULATOR__LATENCY_MS: "5",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let output = "";
  const keep = (d: unknown) => {
    output = (output + String(d)).slice(-20_000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const exited = new Promise<number | null>((resolve) =>
    child.on("exit", (code) => {
      children.delete(child);
      resolve(code);
    }),
  );
  return { child, exited, output: () => output };
}

describe("a worker whose passes keep failing", () => {
  it("goes silent at once, exits with 1 after 60 s, and a new worker finishes the work", async () => {
    const owner = await makeOwner(t.db);
    const config = testConfig();
    const first = spawnWorker();
    const deadline = Date.now() + 30_000;
    while ((await countLiveWorkers(t.db, 10)) === 0) {
      if (Date.now() > deadline) throw new Error(`the worker did not come up: ${first.output()}`);
      await sleep(100);
    }
    // Every claim is refused from now on: each pass of this worker fails.
    await t.db.execute(sql.raw(`create function refuse_claims() returns trigger language plpgsql as $$
      begin raise exception 'claims refused by the test'; end $$`));
    await t.db.execute(sql`create trigger refuse_claims before update on subagent_batch_items
      for each row when (new.status = 'leased') execute function refuse_claims()`);
    const { batch } = await submitBatch(t.db, {
      ...batchSubagent(config, undefined),
      ...owner,
      input: { submission_key: "stuck", items: ["one", "two"] },
      config,
      model: SIM_MODEL,
    });
    const failingFrom = Date.now();

    // Its heartbeat (every 2 s) stopped with the first failed pass: within the 10 s liveness window
    // plus one beat it no longer reads as alive, while the process still runs.
    await sleep(13_000);
    expect(await countLiveWorkers(t.db, 10)).toBe(0);
    expect(first.child.exitCode).toBeNull();

    const code = await Promise.race([first.exited, sleep(80_000).then(() => "still running" as const)]);
    expect(code, first.output().slice(-2_000)).toBe(1);
    expect(Date.now() - failingFrom).toBeGreaterThanOrEqual(59_000);
    expect(first.output()).toMatch(/passes failing for 6\d s; exiting with 1/);

    // What `npm start` does next: a new worker; with the database taking claims again, it finishes the batch.
    await t.db.execute(sql`drop trigger refuse_claims on subagent_batch_items`);
    const second = spawnWorker();
    const until = Date.now() + 30_000;
    let done = await getBatch(t.db, { ...owner, batchId: batch.id });
    while (done.status !== "completed") {
      if (Date.now() > until) throw new Error(`batch still ${done.status}: ${second.output()}`);
      await sleep(200);
      done = await getBatch(t.db, { ...owner, batchId: batch.id });
    }
    expect(done.succeededCount).toBe(2);
    second.child.kill("SIGTERM");
    expect(await second.exited).toBe(0);
  }, 150_000);
});
