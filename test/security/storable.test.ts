import { type ChildProcess, spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BatchProjection, batchProjectionSchema, resultLineSchema } from "@/lib/api/batches";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { sleep } from "../batches/support";
import { send, startWebServer, type WebServer } from "../helpers/web-server";
import { uploadForm } from "../workspace/support";

/**
 * Any text is storable (DESIGN "Holding under abuse (third round)"), proven from outside: real
 * sockets, a real worker process, real PostgreSQL and the simulator. A model's typed answer, a
 * tool's output and a judge's reason holding U+0000 or a lone surrogate are stored with U+FFFD
 * instead, and another user's batch finishes meanwhile: one poisoned row no longer fails every
 * worker pass after it. A person's approval reason holding NUL is an ordinary 200.
 */

const U0 = "\u0000";
const FFFD = "\ufffd";
const WORKER_ENV = {
  FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4",
  FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.1",
  FLOTILLA__SIMULATOR__LATENCY_MS: "5",
  FLOTILLA__TOOLS__REQUIRE_APPROVAL: '["text/count_*"]',
};

// The web process (this one): the lead may write files, and its writes wait for a person.
process.env.FLOTILLA__LEAD__TOOL_GROUPS = JSON.stringify(["workspace"]);
process.env.FLOTILLA__TOOLS__REQUIRE_APPROVAL = JSON.stringify(["workspace/write_file"]);
process.env.FLOTILLA__SIMULATOR__LATENCY_MS = "5";
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
const tdb = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let bob: TestUser;
const workers = new Set<ChildProcess>();

beforeAll(async () => {
  server = await startWebServer();
  alice = await makeUser(tdb, "poisoner");
  bob = await makeUser(tdb, "bystander");
  spawnWorker();
  const deadline = Date.now() + 30_000;
  while ((await tdb.sql`select 1 from worker_heartbeats where kind = 'worker' and stopped_at is null`).length === 0) {
    if (Date.now() > deadline) throw new Error("the worker did not come up");
    await sleep(100);
  }
});

afterAll(async () => {
  await Promise.all(
    [...workers].map(
      (w) =>
        new Promise<void>((resolve) => {
          w.once("exit", () => resolve());
          w.kill("SIGTERM");
        }),
    ),
  );
  await server?.close();
});

function spawnWorker(): void {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")));
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    env: { ...base, DATABASE_URL: tdb.url, LOG_LEVEL: "warn", NODE_ENV: "production", ...WORKER_ENV },
    stdio: ["ignore", "ignore", "inherit"],
  });
  workers.add(child);
  child.on("exit", () => workers.delete(child));
}

async function api(user: TestUser, path: string, init: { json?: unknown; body?: Buffer; headers?: Record<string, string> } = {}) {
  const res = await send(server, path, { ...init, headers: { authorization: `Bearer ${user.token}`, ...init.headers } });
  return { status: res.status, body: res.body, json: () => JSON.parse(res.body) as unknown };
}

let keys = 0;
async function submit(user: TestUser, threadId: string, input: Record<string, unknown>): Promise<BatchProjection> {
  const res = await api(user, `/api/threads/${threadId}/subagent-batches`, { json: { submission_key: `storable-${++keys}`, ...input } });
  expect(res.status, res.body).toBe(201);
  return batchProjectionSchema.parse(res.json());
}

async function settled(user: TestUser, threadId: string, batchId: string, timeoutMs = 30_000): Promise<BatchProjection> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await api(user, `/api/threads/${threadId}/subagent-batches/${batchId}`);
    const batch = batchProjectionSchema.parse(res.json());
    if (["completed", "failed"].includes(batch.status)) return batch;
    if (Date.now() > deadline) throw new Error(`batch still ${batch.status}: ${JSON.stringify(batch.counts)}`);
    await sleep(100);
  }
}

async function results(user: TestUser, threadId: string, batchId: string) {
  const res = await api(user, `/api/threads/${threadId}/subagent-batches/${batchId}/results.jsonl`);
  expect(res.status).toBe(200);
  return res.body
    .split("\n")
    .filter(Boolean)
    .map((line) => resultLineSchema.parse(JSON.parse(line)));
}

/**
 * Submits the poisoned batch, then another user's two-item batch, and waits for both: the other
 * user's batch completes, and the poisoned one ends (nothing left queued or running).
 */
async function whileBystanderRuns(poison: () => Promise<{ threadId: string; batch: BatchProjection }>) {
  const { threadId, batch } = await poison();
  const bobThread = await makeThread(tdb, bob);
  const other = await submit(bob, bobThread, { items: ["first small thing", "second small thing"] });
  const done = await settled(bob, bobThread, other.id);
  expect(done).toMatchObject({ status: "completed", counts: { succeeded: 2 } });
  const poisoned = await settled(alice, threadId, batch.id);
  expect(poisoned.counts).toMatchObject({ queued: 0, leased: 0, running: 0 });
  return results(alice, threadId, batch.id);
}

describe("a poisoned answer", () => {
  it("typed answers with NUL and lone surrogates (values and keys) are stored with U+FFFD", async () => {
    const threadId = await makeThread(tdb, alice);
    const lines = await whileBystanderRuns(async () => ({
      threadId,
      batch: await submit(alice, threadId, {
        output_schema: { type: "object" },
        // The directives' JSON escapes reach the answer as the characters themselves.
        items: ['[[json:{"a":"x\\u0000y"}]]', '[[json:{"k\\u0000":["\\ud800", "\\udc00z"]}]]', "an ordinary item"],
      }),
    }));
    expect(lines.map((l) => l.status)).toEqual(["succeeded", "succeeded", "succeeded"]);
    expect(lines[0]!.output).toEqual({ a: `x${FFFD}y` });
    // results.jsonl writes a typed answer's result as its value: the output's.
    expect(lines[0]!.result).toEqual({ a: `x${FFFD}y` });
    expect(lines[1]!.output).toEqual({ [`k${FFFD}`]: [FFFD, `${FFFD}z`] });
  });

  it("a plain answer whose stored preview cut falls inside a surrogate pair is stored", async () => {
    // The preview is cut at result_preview_max_chars (2,000) code units: after one "a", the cut
    // leaves the high half of an emoji, which jsonb refuses unless it becomes U+FFFD.
    const threadId = await makeThread(tdb, alice);
    const emoji = "\u{1F600}".repeat(1_200);
    const lines = await whileBystanderRuns(async () => ({ threadId, batch: await submit(alice, threadId, { items: [`a${emoji} [[echo]]`] }) }));
    expect(lines[0]).toMatchObject({ status: "succeeded", result: `a${emoji}` });
    const [row] = await tdb.sql<{ preview: string }[]>`
      select preview from subagent_batch_items i join subagent_batches b on b.id = i.batch_id where b.thread_id = ${threadId}`;
    expect(row!.preview).toBe(`a${emoji.slice(0, 1_998)}${FFFD}`);
  });
});

describe("a poisoned tool output", () => {
  it("a files batch whose tools read a file holding NUL, cut an emoji in half and write NUL stores with U+FFFD", async () => {
    const threadId = await makeThread(tdb, alice);
    const request = new Request("http://upload.test/", {
      method: "POST",
      body: uploadForm([
        { path: "inbox/nul.txt", content: `before${U0}after` },
        { path: "inbox/emoji.txt", content: "\u{1F600}\u{1F601} smile" },
      ]),
    });
    const uploaded = await api(alice, `/api/threads/${threadId}/files`, {
      body: Buffer.from(await request.arrayBuffer()),
      headers: { "content-type": request.headers.get("content-type")! },
    });
    expect(uploaded.status, uploaded.body).toBe(201);
    const lines = await whileBystanderRuns(async () => ({
      threadId,
      batch: await submit(alice, threadId, {
        files: "inbox/*",
        // read_file of one character returns half an emoji (a lone surrogate); write_file's
        // content holds NUL. Two model steps: the first (its call and output) is a durable step.
        prompt_template:
          'Read {{file}} [[tool:read_file {"path":"{{file}}","limit":1}]] [[tool:write_file {"path":"out/{{file}}","content":"x\\u0000y"}]]',
      }),
    }));
    expect(lines.map((l) => [l.item_key, l.status])).toEqual([
      ["inbox/emoji.txt", "succeeded"],
      ["inbox/nul.txt", "succeeded"],
    ]);
    const runs = await tdb.sql<{ item_key: string; tool_calls: string; transcript: string }[]>`
      select i.item_key, r.tool_calls::text, r.transcript::text from agent_runs r
        join subagent_batch_items i on i.run_id = r.id where r.thread_id = ${threadId} order by i.item_key`;
    expect(runs.map((r) => r.item_key)).toEqual(["inbox/emoji.txt", "inbox/nul.txt"]);
    for (const run of runs) {
      // The transcript holds the calls' inputs and outputs themselves (the tool call records
      // hold JSON previews, where NUL is an escape); NUL itself is in the written file's bytes.
      expect(run.transcript).toContain(`"content": "x${FFFD}y"`);
      expect(JSON.parse(run.tool_calls).map((c: { name: string; status: string }) => [c.name, c.status])).toEqual([
        ["read_file", "ok"],
        ["write_file", "ok"],
      ]);
    }
    expect(runs[0]!.transcript).toContain(`"text": "${FFFD}"`);
    // The file holding NUL is reported as binary, never handed to the model as text.
    expect(runs[1]!.transcript).toContain("is a binary file");
    const [written] = await tdb.sql<{ bytes: Buffer }[]>`
      select bytes from workspace_files where thread_id = ${threadId} and path = 'out/inbox/nul.txt'`;
    expect(written!.bytes.toString("utf8")).toBe(`x${U0}y`);
  });
});

describe("a poisoned judge reason", () => {
  it("a judge's reason holding NUL and a lone surrogate is stored with U+FFFD", async () => {
    const threadId = await makeThread(tdb, alice);
    const lines = await whileBystanderRuns(async () => ({
      threadId,
      batch: await submit(alice, threadId, {
        // [[judge-fail:REASON]]: the simulated judge gives 0 with REASON, its \uXXXX decoded.
        items: ["grade me [[judge-fail:bad\\u0000answer \\ud800]]", "grade me too"],
        checks: [{ name: "quality", type: "judge", rubric: "Is it good?" }],
      }),
    }));
    expect(lines.map((l) => [l.status, l.verdict])).toEqual([
      ["succeeded", "failed"],
      ["succeeded", "passed"],
    ]);
    expect(lines[0]!.checks).toEqual([{ name: "quality", passed: false, score: 0, reason: `bad${FFFD}answer ${FFFD}` }]);
  });

  it("a retry check's reason holding NUL reaches the next attempt and the item's error, stored", async () => {
    const threadId = await makeThread(tdb, alice);
    const lines = await whileBystanderRuns(async () => ({
      threadId,
      batch: await submit(alice, threadId, {
        items: ["grade me [[judge-fail:still\\u0000bad]]"],
        checks: [{ name: "quality", type: "judge", rubric: "Is it good?", on_fail: "retry" }],
      }),
    }));
    // Every attempt (subagent_batches.max_attempts, 3) read the stored reason and failed again.
    expect(lines[0]).toMatchObject({ status: "failed", attempts: 3, error: `check_failed: quality: still${FFFD}bad` });
  });
});

describe("a person's approval", () => {
  it("an approval input and a reason holding NUL: parked and decided (200), never a 500", async () => {
    const threadId = await makeThread(tdb, alice);
    const batch = await submit(alice, threadId, {
      items: ['Count it [[tool:count_text {"text":"one\\u0000two"}]]', 'Count it [[tool:count_text {"text":"three"}]]'],
    });
    const base = `/api/threads/${threadId}/subagent-batches/${batch.id}`;
    const deadline = Date.now() + 30_000;
    let waiting: { item_id: string; input: string }[] = [];
    while (waiting.length < 2) {
      if (Date.now() > deadline) throw new Error("the items did not park");
      await sleep(100);
      waiting = ((await api(alice, `${base}/approvals`)).json() as { approvals: typeof waiting }).approvals;
    }
    expect(waiting.map((w) => w.input)).toContain(`{"text": "one${FFFD}two"}`);
    const denied = await api(alice, `${base}/items/${waiting[0]!.item_id}/approval`, {
      json: { decision: "deny", reason: `no${U0}way \ud800` },
    });
    expect(denied.status, denied.body).toBe(200);
    // No tool of that name waits: nothing was shown, nothing is decided.
    const all = await api(alice, `${base}/approvals`, { json: { tool: `count_text${U0}`, decision: "approve", reason: `fine${U0}`, seen: 0 } });
    expect(all.status, all.body).toBe(200);
    expect(all.json()).toMatchObject({ decided: 0 });
    const [row] = await tdb.sql<{ reason: string }[]>`select reason from tool_approvals where item_id = ${waiting[0]!.item_id}`;
    expect(row!.reason).toBe(`no${FFFD}way ${FFFD}`);
    const approved = await api(alice, `${base}/approvals`, { json: { tool: "count_text", decision: "approve", reason: `go${U0}`, seen: 1 } });
    expect(approved.status, approved.body).toBe(200);
    const done = await settled(alice, threadId, batch.id);
    expect(done.counts).toMatchObject({ succeeded: 2 });
  });
});

describe("a person's chat message", () => {
  it("a message holding NUL and a lone surrogate is answered, and stored with U+FFFD with the lead's reply", async () => {
    const threadId = await makeThread(tdb, alice);
    const text = `say back a${U0}b \ud800 [[echo]]`;
    const res = await api(alice, `/api/threads/${threadId}/chat`, {
      json: { message: { id: "poisoned-1", role: "user", parts: [{ type: "text", text }] } },
    });
    expect(res.status, res.body).toBe(200);
    const rows = await tdb.sql<{ role: string; parts: string }[]>`
      select role, parts::text from messages where thread_id = ${threadId} order by created_at`;
    expect(rows.map((r) => r.role)).toEqual(["user", "assistant"]);
    expect(rows[0]!.parts).toContain(`a${FFFD}b ${FFFD} [[echo]]`);
    // The lead's reply ([[echo]]) and its stored stream hold the same text, storable.
    expect(rows[1]!.parts).toContain(`a${FFFD}b ${FFFD}`);
    const [chunks] = await tdb.sql<{ text: string }[]>`
      select string_agg(c.chunk::text, '') as text from chat_stream_chunks c join chat_streams s on s.id = c.stream_id
       where s.thread_id = ${threadId}`;
    expect(chunks!.text).toContain(FFFD);
  });
});

describe("a lead's call that waits for a person", () => {
  it("its arguments holding NUL are stored and listed with U+FFFD, and a reason holding NUL decides it (200)", async () => {
    const threadId = await makeThread(tdb, alice);
    const res = await api(alice, `/api/threads/${threadId}/chat`, {
      json: {
        message: {
          id: "poisoned-call",
          role: "user",
          parts: [{ type: "text", text: 'Save it [[tool:write_file {"path":"notes/a.md","content":"x\\u0000y"}]]' }],
        },
      },
    });
    expect(res.status, res.body).toBe(200);
    const deadline = Date.now() + 30_000;
    let waiting: { id: string; input: unknown }[] = [];
    while (waiting.length === 0) {
      if (Date.now() > deadline) throw new Error("the lead's call did not wait");
      await sleep(100);
      const listed = await api(alice, `/api/threads/${threadId}/approvals`);
      expect(listed.status, listed.body).toBe(200);
      waiting = (listed.json() as { approvals: typeof waiting }).approvals;
    }
    expect(waiting[0]!.input).toEqual({ path: "notes/a.md", content: `x${FFFD}y` });
    const denied = await api(alice, `/api/threads/${threadId}/approvals/${waiting[0]!.id}`, {
      json: { decision: "deny", reason: `not${U0}now \udc00` },
    });
    expect(denied.status, denied.body).toBe(200);
    expect(denied.json()).toMatchObject({ approval: { status: "denied", reason: `not${FFFD}now ${FFFD}` } });
  });
});
