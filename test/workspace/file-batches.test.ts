import { batchSubagent } from "@/server/agent/registry";
import type { ChildProcess } from "node:child_process";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchProjectionSchema, itemPageSchema } from "@/lib/api/batches";
import { createBatchTools } from "@/server/agent/tools/batch";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { exportLines } from "../helpers/export";
import { parseExecutionSpec } from "@/server/batches/spec";
import { resolveModel } from "@/server/models/index";
import { writeHeartbeat } from "@/server/runtime/heartbeat";
import { spawnBenchWorkers, stopBenchWorkers } from "../../bench/workers";
import { call, errorOf, makeThread, makeUser, rowCounts, setupApiDatabase, type TestUser } from "../api/helpers";
import { SIM_MODEL, sleep, testConfig } from "../batches/support";
import type { TestDatabase } from "../helpers/db";
import * as artifactsRoute from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/files/route";
import { fileListSchema } from "@/lib/api/files";
import { buildRequest, ORIGIN } from "../api/helpers";
import { upload } from "./support";

/** Batches over workspace files: from the HTTP API, from batch_task, and run by a real worker process. */

let tdb: TestDatabase;
let alice: TestUser;
let bob: TestUser;
const workers: ChildProcess[] = [];

beforeAll(async () => {
  tdb = await setupApiDatabase();
  alice = await makeUser(tdb, "alice");
  bob = await makeUser(tdb, "bob");
});

afterAll(async () => {
  await stopBenchWorkers(workers);
});

async function threadWithFiles(paths: string[]): Promise<string> {
  const threadId = await makeThread(tdb, alice);
  const res = await upload(
    threadId,
    alice,
    paths.map((path) => ({ path, content: `contents of ${path}` })),
  );
  expect(res.status).toBe(201);
  return threadId;
}

async function specOf(batchId: string) {
  const [row] = await tdb.sql<{ execution_spec: unknown }[]>`select execution_spec from subagent_batches where id = ${batchId}`;
  return parseExecutionSpec(row!.execution_spec);
}

async function promptsOf(batchId: string) {
  return tdb.sql<{ item_key: string; position: number; prompt: string }[]>`
    select item_key, position, prompt from subagent_batch_items where batch_id = ${batchId} order by position`;
}

describe("POST /subagent-batches with files", () => {
  it("makes one item per matching file in path order, keyed by path, with the workspace group added", async () => {
    const threadId = await threadWithFiles(["reports/b.md", "reports/a.md", "reports/sub/c.md", "notes.txt", "reports/d.txt"]);
    const res = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
      token: alice.token,
      json: { submission_key: "over-files", files: "reports/*.md", prompt_template: "Summarize {{file}} (file {{file}})" },
    });
    expect(res.status).toBe(201);
    const batch = batchProjectionSchema.parse(await res.json());
    expect(batch.total).toBe(2);
    expect(await promptsOf(batch.id)).toEqual([
      { item_key: "reports/a.md", position: 1, prompt: "Summarize reports/a.md (file reports/a.md)" },
      { item_key: "reports/b.md", position: 2, prompt: "Summarize reports/b.md (file reports/b.md)" },
    ]);
    const page = itemPageSchema.parse(
      await (await call("GET", `/api/threads/${threadId}/subagent-batches/${batch.id}/items`, { token: alice.token })).json(),
    );
    expect(page.items.map((i) => i.item_key)).toEqual(["reports/a.md", "reports/b.md"]);

    const spec = await specOf(batch.id);
    expect(spec.tool_groups).toEqual(["clock", "text", "workspace"]);
    expect(spec.subagent.tool_groups).toEqual(["clock", "text"]);

    // `**` crosses folders; an ordinary batch keeps the definition's groups only.
    const deep = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
      token: alice.token,
      json: { submission_key: "deep", files: "**/*.md", prompt_template: "{{file}}" },
    });
    const deepBatch = batchProjectionSchema.parse(await deep.json());
    expect((await promptsOf(deepBatch.id)).map((i) => i.item_key)).toEqual(["reports/a.md", "reports/b.md", "reports/sub/c.md"]);
    const plain = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
      token: alice.token,
      json: { submission_key: "plain", items: ["x"] },
    });
    expect((await specOf(batchProjectionSchema.parse(await plain.json()).id)).tool_groups).toEqual(["clock", "text"]);
  });

  it("refuses a glob matching no file with 400 naming the glob, and writes nothing", async () => {
    const threadId = await threadWithFiles(["a.md"]);
    const before = await rowCounts(tdb);
    const res = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
      token: alice.token,
      json: { submission_key: "none", files: "reports/*.csv", prompt_template: "Read {{file}}" },
    });
    expect(res.status).toBe(400);
    const err = await errorOf(res);
    expect(err).toEqual({
      code: "validation_failed",
      message: `files: the glob "reports/*.csv" matches no file in this thread's workspace`,
    });
    expect(await rowCounts(tdb)).toEqual(before);
  });

  it.each([
    [{ files: "*.md", prompt_template: "Read it" }, "prompt_template: must contain {{file}}"],
    [{ files: "*.md" }, "prompt_template"],
    [{ files: "*.md", items: ["a"], prompt_template: "{{file}}" }, "files: send either items or files, not both"],
    [{ files: "", prompt_template: "{{file}}" }, "files: must be a glob"],
    [{ files: "*.md", prompt_template: "{{file}}", max_live_items: 1_000_000 }, "max_live_items"],
  ])("refuses %j with 400 naming the field", async (fields, message) => {
    const threadId = await threadWithFiles(["a.md"]);
    const before = await rowCounts(tdb);
    const res = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
      token: alice.token,
      json: { submission_key: `bad-${Math.random()}`, ...fields },
    });
    expect(res.status).toBe(400);
    expect((await errorOf(res)).message).toContain(message);
    expect(await rowCounts(tdb)).toEqual(before);
  });

  it("a replay answers 200 with the same batch, even after the files are gone", async () => {
    const threadId = await threadWithFiles(["r/1.md", "r/2.md"]);
    const body = { submission_key: "replay-files", files: "r/*.md", prompt_template: "Read {{file}}" };
    const first = await call("POST", `/api/threads/${threadId}/subagent-batches`, { token: alice.token, json: body });
    expect(first.status).toBe(201);
    const batch = batchProjectionSchema.parse(await first.json());
    for (const path of ["r/1.md", "r/2.md"])
      await tdb.sql`delete from workspace_files where thread_id = ${threadId} and path = ${path}`;
    const again = await call("POST", `/api/threads/${threadId}/subagent-batches`, { token: alice.token, json: body });
    expect(again.status).toBe(200);
    expect(batchProjectionSchema.parse(await again.json())).toMatchObject({ id: batch.id, total: 2 });
  });

  it("never matches another user's files: their thread is 404", async () => {
    const threadId = await threadWithFiles(["a.md"]);
    const res = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
      token: bob.token,
      json: { submission_key: "steal", files: "*", prompt_template: "{{file}}" },
    });
    expect(res.status).toBe(404);
  });
});

describe("batch_task with files", () => {
  it("submits a batch over the thread's files and reports bad combinations as tool errors", async () => {
    const threadId = await threadWithFiles(["data/1.csv", "data/2.csv"]);
    const config = testConfig({ simulator: { latency_ms: 1 } });
    const [run] = await tdb.db.execute<{ id: string }>(
      sql`insert into agent_runs (user_id, thread_id, kind, definition, model, status)
          values (${alice.userId}, ${threadId}, 'lead', 'lead', 'simulator', 'running') returning id`,
    );
    await writeHeartbeat(tdb.db, { id: "files-suite-worker", capacity: 1, running: 0 });
    const tools = await createBatchTools({
      db: tdb.db,
      config,
      userId: alice.userId,
      threadId,
      runId: run!.id,
      model: resolveModel(config, {}),
      abortSignal: new AbortController().signal,
    });
    const exec = (input: unknown) =>
      tools.batch_task!.execute!(input as never, { toolCallId: "call-f", messages: [] }) as Promise<Record<string, unknown>>;
    expect(await exec({ files: "data/*.csv" })).toEqual({
      error: "A batch over files needs a prompt_template containing {{file}}.",
    });
    expect(await exec({ files: "data/*.csv", items: ["x"], prompt_template: "{{file}}" })).toEqual({
      error: "Pass exactly one of items, files (a glob) and golden_set.",
    });
    expect(await exec({ files: "nothing/*", prompt_template: "{{file}}" })).toEqual({
      error: `files: the glob "nothing/*" matches no file in this thread's workspace`,
    });
    const receipt = await exec({ files: "data/*.csv", prompt_template: "Check {{file}}" });
    expect(receipt).toMatchObject({ total: 2, created: true });
    expect((await promptsOf(String(receipt.batch_id))).map((i) => [i.item_key, i.prompt])).toEqual([
      ["data/1.csv", "Check data/1.csv"],
      ["data/2.csv", "Check data/2.csv"],
    ]);
    expect((await specOf(String(receipt.batch_id))).tool_groups).toContain("workspace");
  });
});

/** GET /api/threads/{thread}/subagent-batches/{batch}/files through its route handler. */
async function artifacts(threadId: string, batchId: string, auth: TestUser): Promise<Response> {
  const url = new URL(`/api/threads/${threadId}/subagent-batches/${batchId}/files`, ORIGIN);
  return artifactsRoute.GET(buildRequest("GET", url, { token: auth.token }), { params: Promise.resolve({ threadId, batchId }) });
}

describe("a real worker process", () => {
  it("runs each item with the workspace tools: the sub-agent reads its own file", async () => {
    const paths = ["inbox/alpha.txt", "inbox/beta.txt", "inbox/gamma.txt"];
    const threadId = await threadWithFiles(paths);
    workers.push(
      ...spawnBenchWorkers({
        databaseUrl: tdb.url,
        count: 1,
        slots: 2,
        env: { FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.1", FLOTILLA__SIMULATOR__LATENCY_MS: "5" },
      }),
    );
    const scope = { userId: alice.userId, threadId };
    const { batch } = await submitBatch(tdb.db, { ...batchSubagent(testConfig(), undefined),
      ...scope,
      // [[tool:read_file ...]] makes the simulator call read_file; it exists only with the workspace group
      // (without it the call comes back as an unknown-tool error and the file's text never appears).
      input: { submission_key: "worker-reads", files: "inbox/*", prompt_template:
          'Read {{file}} [[tool:read_file {"path":"{{file}}"}]] [[tool:write_file {"path":"out/{{file}}","content":"read {{file}}"}]]',
      },
      config: testConfig(),
      model: SIM_MODEL,
    });
    const deadline = Date.now() + 60_000;
    let done = await getBatch(tdb.db, { ...scope, batchId: batch.id });
    while (!["completed", "failed"].includes(done.status)) {
      if (Date.now() > deadline) throw new Error(`batch still ${done.status}`);
      await sleep(100);
      done = await getBatch(tdb.db, { ...scope, batchId: batch.id });
    }
    expect(done).toMatchObject({ status: "completed", succeededCount: 3 });
    const lines = await exportLines(tdb.sql, batch.id);
    expect(lines.map((l) => l.item_key)).toEqual(["inbox/alpha.txt", "inbox/beta.txt", "inbox/gamma.txt"]);
    // A batch over files shows each item's path as its input.
    expect(lines.map((l) => l.input)).toEqual(["inbox/alpha.txt", "inbox/beta.txt", "inbox/gamma.txt"]);
    lines.forEach((line, i) => {
      expect(line.result).toContain("Ran 2 tool calls.");
      expect(line.result).toContain(`read_file:\n{"path":"${paths[i]}","offset":0,"text":"contents of ${paths[i]}"`);
    });

    // The batch's artifacts: what its item runs wrote, never the uploads it read.
    const res = await artifacts(threadId, batch.id, alice);
    expect(res.status).toBe(200);
    const written = fileListSchema.parse(await res.json()).files;
    expect(written.map((f) => f.path)).toEqual(paths.map((p) => `out/${p}`));
    const runIds = new Set(
      (await tdb.sql<{ run_id: string }[]>`select run_id from subagent_batch_items where batch_id = ${batch.id}`).map((r) => r.run_id),
    );
    expect(written.every((f) => f.created_by_run_id !== null && runIds.has(f.created_by_run_id))).toBe(true);
    // An upload overwriting an artifact makes it the user's file, no longer the batch's.
    expect((await upload(threadId, alice, [{ path: "out/inbox/beta.txt", content: "mine now" }])).status).toBe(201);
    const after = fileListSchema.parse(await (await artifacts(threadId, batch.id, alice)).json()).files;
    expect(after.map((f) => f.path)).toEqual(["out/inbox/alpha.txt", "out/inbox/gamma.txt"]);
    // Owner-scoped: another user, another thread of the owner, or an unknown batch are 404.
    for (const res of [await artifacts(threadId, batch.id, bob), await artifacts(await makeThread(tdb, alice), batch.id, alice)]) {
      expect(res.status).toBe(404);
      expect(await errorOf(res)).toMatchObject({ code: "not_found" });
    }
    expect((await artifacts(threadId, "00000000-0000-4000-8000-000000000000", alice)).status).toBe(404);
    expect((await artifacts(threadId, "not-a-uuid", alice)).status).toBe(404);
  });
});
