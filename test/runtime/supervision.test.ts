import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { batchSubagent } from "@/server/agent/registry";
import { createApiToken } from "@/server/auth/tokens";
import { createUser } from "@/server/auth/users";
import { createThread } from "@/server/chat/threads";
import { claimItems, markRunning } from "@/server/batches/claim";
import { submitBatch } from "@/server/batches/submit";
import { makeOwner, SIM_MODEL, testConfig } from "../batches/support";
import { createTestDatabase } from "../helpers/db";
import { freePort } from "../helpers/free-port";

/**
 * `npm start` itself (node --import tsx scripts/start.ts) as a real process tree: a web or
 * worker process that dies comes back, with the pause doubling while it keeps dying, and only
 * what it held goes back to the queue (never what another process with its host and pid holds); SIGTERM
 * still stops everything; and a start whose embedded database port is taken says which port and
 * how to choose another. The web process serves the production build (`next build`), which the
 * restart test needs in place (CI builds before the browser tests; locally, `npx next build`).
 */

const root = path.resolve(__dirname, "../..");
const hasBuild = existsSync(path.join(root, ".next", "BUILD_ID"));
const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Flotilla {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function startFlotilla(env: Record<string, string>): Flotilla {
  const base: Record<string, string | undefined> = { ...process.env };
  for (const key of ["VITEST", "VITEST_POOL_ID", "VITEST_WORKER_ID", "NODE_ENV", "DATABASE_URL", "FLOTILLA_EMBEDDED_PORT"]) delete base[key];
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/start.ts"], {
    cwd: root,
    env: { ...base, LOG_FORMAT: "json", NEXTAUTH_SECRET: "supervision-test-secret", ...env } as unknown as NodeJS.ProcessEnv,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { child, output: () => out, exited };
}


/** The supervised children of `pid`: { web, worker } process ids (undefined while one is down). */
function childrenOf(pid: number): { web?: number; worker?: number } {
  let listing = "";
  try {
    listing = execFileSync("ps", ["-o", "pid=,args=", "--ppid", String(pid)], { encoding: "utf8" });
  } catch {
    return {}; // no children
  }
  const rows = listing
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean)
    .map((line) => ({ pid: Number(line.split(/\s+/, 1)[0]), args: line }));
  return {
    web: rows.find((r) => r.args.includes("scripts/web.ts"))?.pid,
    worker: rows.find((r) => r.args.includes("server/worker/main.ts"))?.pid,
  };
}

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs: number, flotilla?: Flotilla): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms\n${flotilla?.output() ?? ""}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function healthy(port: number): Promise<true | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/api/health`, { signal: AbortSignal.timeout(2_000) });
    return res.status === 200 ? true : undefined;
  } catch {
    return undefined;
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe("npm start supervises its processes", () => {
  it.skipIf(!hasBuild)(
    "restarts a killed web process (health answers again) and a killed worker, the pause doubling, and SIGTERM still stops all",
    { timeout: 240_000 },
    async () => {
      const tdb = await createTestDatabase({ max: 1 });
      const port = await freePort();
      const dataDir = mkdtempSync(path.join(os.tmpdir(), "flotilla-supervision-"));
      cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
      const flotilla = startFlotilla({
        DATABASE_URL: tdb.url,
        PORT: String(port),
        FLOTILLA_DATA_DIR: dataDir,
        FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "2",
      });
      const pid = flotilla.child.pid!;
      cleanups.push(async () => {
        if (flotilla.child.exitCode === null) {
          flotilla.child.kill("SIGTERM");
          await flotilla.exited;
        }
      });

      await until("first health answer", () => healthy(port), 120_000, flotilla);
      const first = childrenOf(pid);
      expect(first.web).toBeDefined();
      expect(first.worker).toBeDefined();

      // The web process dies: it comes back and serves again; the worker was never touched.
      process.kill(first.web!, "SIGKILL");
      await until("restart logged", () => (/web exited \(SIGKILL\); restarting in 1 s/.test(flotilla.output()) ? true : undefined), 10_000, flotilla);
      const back = await until("a new web process", () => {
        const web = childrenOf(pid).web;
        return web && web !== first.web ? web : undefined;
      }, 30_000, flotilla);
      await until("health after the restart", () => healthy(port), 120_000, flotilla);
      expect(childrenOf(pid).worker).toBe(first.worker);
      expect(flotilla.child.exitCode).toBeNull();

      // The worker dies holding leases (items that sleep 60 s): its items go back to the queue at
      // once, not after the 120 s lease, and are not left under the dead process's name.
      const owner = await makeOwner(tdb.db);
      const config = testConfig();
      await submitBatch(tdb.db, {
        ...batchSubagent(config, undefined),
        ...owner,
        input: { submission_key: "held", items: ["[[sleep:60000]] one", "[[sleep:60000]] two"] },
        config,
        model: SIM_MODEL,
      });
      // The supervisor gave the worker its id: it is the worker's heartbeat and lease owner.
      const workerId = await until(
        "the worker's heartbeat",
        async () => (await tdb.sql<{ id: string }[]>`select id from worker_heartbeats where kind = 'worker' and pid = ${first.worker!}`)[0]?.id,
        30_000,
        flotilla,
      );
      const heldBy = async (id: string) =>
        (await tdb.sql<{ owner: string | null; status: string }[]>`select lease_owner as owner, status from subagent_batch_items`).filter(
          (r) => r.owner === id,
        );
      await until("the worker running both items", async () => ((await heldBy(workerId)).filter((r) => r.status === "running").length === 2 ? true : undefined), 30_000, flotilla);

      // Another worker, alive, in a container with the same hostname where its pid is this
      // worker's pid here (its id in the old form, host:pid:random), runs two items of its own.
      const twin = `${os.hostname()}:${first.worker}:7a1e`;
      await tdb.sql`insert into worker_heartbeats (id, kind, host, pid, version, capacity) values (${twin}, 'worker', ${os.hostname()}, ${first.worker!}, 'v', 2)`;
      const { batch: theirs } = await submitBatch(tdb.db, {
        ...batchSubagent(config, undefined),
        ...owner,
        input: { submission_key: "twin", items: ["[[sleep:60000]] three", "[[sleep:60000]] four"] },
        config,
        model: SIM_MODEL,
      });
      // This worker's two slots are busy (subagent_runtime.max_running 2): the twin claims both.
      const claimed = await claimItems(tdb.db, { workerId: twin, limit: 2, leaseSeconds: 600 });
      expect(claimed.map((c) => c.batchId)).toEqual([theirs.id, theirs.id]);
      expect(await markRunning(tdb.db, { workerId: twin, leaseSeconds: 600, items: claimed })).toHaveProperty("size", 2);

      // The worker dies twice in a row: 1 s, then 2 s.
      const killedAt = Date.now();
      process.kill(first.worker!, "SIGKILL");
      await until("the dead worker's items back in the queue", async () => ((await heldBy(workerId)).length === 0 ? true : undefined), 5_000, flotilla);
      expect(Date.now() - killedAt).toBeLessThan(5_000);
      await until("the return logged", () => (/returned 2 items worker 1 held to the queue/.test(flotilla.output()) ? true : undefined), 5_000, flotilla);
      // The twin keeps its items and reads as alive: nothing was matched on host and pid.
      expect((await heldBy(twin)).map((r) => r.status)).toEqual(["running", "running"]);
      expect((await tdb.sql<{ stopped_at: Date | null }[]>`select stopped_at from worker_heartbeats where id = ${twin}`)[0]?.stopped_at).toBeNull();
      const second = await until("a new worker", () => {
        const worker = childrenOf(pid).worker;
        return worker && worker !== first.worker ? worker : undefined;
      }, 30_000, flotilla);
      process.kill(second, "SIGKILL");
      await until("second worker restart logged", () => (/worker 1 exited \(SIGKILL\); restarting in 2 s/.test(flotilla.output()) ? true : undefined), 10_000, flotilla);
      expect(flotilla.output()).toMatch(/worker 1 exited \(SIGKILL\); restarting in 1 s/);
      const third = await until("a third worker", () => {
        const worker = childrenOf(pid).worker;
        return worker && worker !== second ? worker : undefined;
      }, 30_000, flotilla);

      // SIGTERM (what Ctrl-C does too): everything stops, nothing restarts.
      flotilla.child.kill("SIGTERM");
      await flotilla.exited;
      expect(flotilla.output()).toMatch(/web and worker stopped/);
      expect(alive(back)).toBe(false);
      expect(alive(third)).toBe(false);
      expect(await healthy(port)).toBeUndefined();
    },
  );

  it.skipIf(!hasBuild)(
    "a web process killed in the middle of a reply: the reply ends interrupted, the thread's next message is answered at once after the restart, and an approved batch card whose continuation died shows its batch or that it was not carried out",
    { timeout: 420_000 },
    async () => {
      const tdb = await createTestDatabase({ max: 2 });
      const port = await freePort();
      const dataDir = mkdtempSync(path.join(os.tmpdir(), "flotilla-web-crash-"));
      cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
      // Every batch_task asks the person first (the simulator is free; 0 always asks).
      const flotilla = startFlotilla({
        DATABASE_URL: tdb.url,
        PORT: String(port),
        FLOTILLA_DATA_DIR: dataDir,
        FLOTILLA__SUBAGENT_BATCHES__CONFIRM_OVER_USD: "0",
      });
      cleanups.push(async () => {
        if (flotilla.child.exitCode === null) {
          flotilla.child.kill("SIGTERM");
          await flotilla.exited;
        }
      });
      await until("first health answer", () => healthy(port), 120_000, flotilla);

      const user = await createUser(tdb.db, { email: `crash-${Date.now()}@example.test`, password: "correct horse battery" });
      const token = await createApiToken(tdb.db, { userId: user.id });
      const thread = await createThread(tdb.db, { userId: user.id, title: "crash" });
      const say = (id: string, text: string) =>
        fetch(`http://127.0.0.1:${port}/api/threads/${thread.id}/chat`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: JSON.stringify({ message: { id, role: "user", parts: [{ type: "text", text }] } }),
        });

      // A slow reply (the simulator spreads it over a minute): once its first words arrived, the web process dies.
      const cut = await say("m1", "[[sleep:60000]] tell me a long story");
      expect(cut.status).toBe(200);
      const reader = cut.body!.getReader();
      let streamed = "";
      while (!streamed.includes('"text-delta"')) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`the reply ended before its first words: ${streamed}`);
        streamed += new TextDecoder().decode(value);
      }
      const runOf = async () => (await tdb.sql<{ status: string }[]>`select status from agent_runs where thread_id = ${thread.id} and kind = 'lead' order by created_at limit 1`)[0]?.status;
      expect(await runOf()).toBe("running");
      const web = childrenOf(flotilla.child.pid!).web!;
      process.kill(web, "SIGKILL");
      await reader.read().then(
        () => reader.cancel().catch(() => {}),
        () => {},
      );
      await until("a new web process", () => {
        const next = childrenOf(flotilla.child.pid!).web;
        return next && next !== web ? next : undefined;
      }, 30_000, flotilla);
      await until("health after the restart", () => healthy(port), 120_000, flotilla);

      // The new web process took the dead one's reply for what it is: interrupted, the thread free.
      const back = Date.now();
      const next = await say("m2", "are you still there?");
      expect(next.status, await next.clone().text()).toBe(200);
      expect(await next.text()).toContain('"text-delta"');
      expect(Date.now() - back).toBeLessThan(15_000);
      expect(await runOf()).toBe("interrupted");
      const replies = await tdb.sql<{ id: string }[]>`select id from messages where thread_id = ${thread.id} and role = 'assistant' order by created_at`;
      expect(replies.length).toBe(2); // the note that the cut reply was interrupted, and the answer

      // An approved batch card whose continuation dies: the batch was submitted, then the web
      // process died while the model waited before its next step. Its card shows that batch.
      const cardThread = await createThread(tdb.db, { userId: user.id, title: "card" });
      const api = (p: string, body?: unknown) =>
        fetch(`http://127.0.0.1:${port}/api/threads/${cardThread.id}/${p}`, {
          method: body === undefined ? "GET" : "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
      const ask = await api("chat", { message: { id: "c1", role: "user", parts: [{ type: "text", text: "batch x3: review ticket {{item}} [[wait-after-step:1:60000]]" }] } });
      expect(ask.status).toBe(200);
      await ask.text();
      const card = await until("the approval card", async () => {
        const { approvals } = (await (await api("approvals")).json()) as { approvals: { id: string; tool: string }[] };
        return approvals.find((a) => a.tool === "batch_task");
      }, 30_000, flotilla);
      expect((await api(`approvals/${card.id}`, { decision: "approve" })).status).toBe(200);
      const batchId = await until("the batch submitted", async () => (await tdb.sql<{ id: string }[]>`select id from subagent_batches where thread_id = ${cardThread.id}`)[0]?.id, 30_000, flotilla);
      const cardOf = async () => {
        const rows = await tdb.sql<{ parts: { type: string; state?: string; output?: { batch_id?: string } }[] }[]>`
          select parts from messages where thread_id = ${cardThread.id} and role = 'assistant'`;
        return rows.flatMap((r) => r.parts).find((p) => p.type === "tool-batch_task");
      };
      expect((await cardOf())?.state).toBe("approval-responded");
      const web2 = childrenOf(flotilla.child.pid!).web!;
      process.kill(web2, "SIGKILL");
      await until("a third web process", () => {
        const n = childrenOf(flotilla.child.pid!).web;
        return n && n !== web2 ? n : undefined;
      }, 30_000, flotilla);
      await until("health after the second restart", () => healthy(port), 120_000, flotilla);
      const shown = await until("the card settled", async () => {
        const part = await cardOf();
        return part?.state !== "approval-responded" ? part : undefined;
      }, 10_000, flotilla);
      expect(shown).toMatchObject({ state: "output-available", output: { batch_id: batchId } });

      // An approved card whose continuation dies before its batch is written (a second session
      // holds the batches' table, so the submission waits): after the restart it shows as not
      // carried out, and nothing was submitted.
      const lostThread = await createThread(tdb.db, { userId: user.id, title: "lost" });
      const lostApi = (p: string, body?: unknown) =>
        fetch(`http://127.0.0.1:${port}/api/threads/${lostThread.id}/${p}`, {
          method: body === undefined ? "GET" : "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
      const lostAsk = await lostApi("chat", { message: { id: "l1", role: "user", parts: [{ type: "text", text: "batch x3: check ticket {{item}}" }] } });
      expect(lostAsk.status).toBe(200);
      await lostAsk.text();
      const lostCard = await until("the second approval card", async () => {
        const { approvals } = (await (await lostApi("approvals")).json()) as { approvals: { id: string; tool: string }[] };
        return approvals.find((a) => a.tool === "batch_task");
      }, 30_000, flotilla);
      const holder = postgres(tdb.url, { max: 1, onnotice: () => {} });
      let locked!: () => void;
      let release!: () => void;
      const lockTaken = new Promise<void>((resolve) => (locked = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      const held = holder.begin(async (tx) => {
        await tx`lock table subagent_batches in exclusive mode`;
        locked();
        await released;
      });
      try {
        await lockTaken;
        expect((await lostApi(`approvals/${lostCard.id}`, { decision: "approve" })).status).toBe(200);
        await until("the submission waiting on the lock", async () => {
          const [row] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from pg_stat_activity
            where datname = current_database() and wait_event_type = 'Lock' and application_name = 'flotilla-web'`;
          return row!.n > 0 ? true : undefined;
        }, 30_000, flotilla);
        const web3 = childrenOf(flotilla.child.pid!).web!;
        process.kill(web3, "SIGKILL");
        await until("a fourth web process", () => {
          const n = childrenOf(flotilla.child.pid!).web;
          return n && n !== web3 ? n : undefined;
        }, 30_000, flotilla);
      } finally {
        release();
        await held;
        await holder.end({ timeout: 5 });
      }
      await until("health after the third restart", () => healthy(port), 120_000, flotilla);
      const lostPart = async () => {
        const rows = await tdb.sql<{ parts: { type: string; state?: string; errorText?: string }[] }[]>`
          select parts from messages where thread_id = ${lostThread.id} and role = 'assistant'`;
        return rows.flatMap((r) => r.parts).find((p) => p.type === "tool-batch_task");
      };
      const notRun = await until("the lost card settled", async () => {
        const part = await lostPart();
        return part?.state !== "approval-responded" ? part : undefined;
      }, 10_000, flotilla);
      expect(notRun).toMatchObject({ state: "output-error" });
      expect(notRun?.errorText).toMatch(/^Not carried out: .*nothing was submitted/);
      expect(await tdb.sql`select id from subagent_batches where thread_id = ${lostThread.id}`).toHaveLength(0);
    },
  );

  it("names the taken embedded database port and FLOTILLA_EMBEDDED_PORT instead of failing with 'undefined'", { timeout: 60_000 }, async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise<void>((resolve) => taken.close(() => resolve())));
    const port = (taken.address() as net.AddressInfo).port;
    const dataDir = mkdtempSync(path.join(os.tmpdir(), "flotilla-port-taken-"));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const flotilla = startFlotilla({ FLOTILLA_EMBEDDED_PORT: String(port), FLOTILLA_DATA_DIR: dataDir, PORT: String(await freePort()) });
    expect(await flotilla.exited).toBe(1);
    const failure = flotilla.output().split("\n").find((line) => line.includes("failed to start")) ?? "";
    expect(failure).toContain(`port ${port}`);
    expect(failure).toContain("FLOTILLA_EMBEDDED_PORT");
    expect(failure).not.toMatch(/undefined/);
  });
});
