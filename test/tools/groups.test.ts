import { batchSubagent } from "@/server/agent/registry";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import type { UIMessageStreamWriter } from "ai";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configSchema, type FlotillaConfigInput } from "@/lib/config";
import { createRun } from "@/server/agent/runs";
import { runSwarm } from "@/server/agent/swarm/run";
import { createTaskTool } from "@/server/agent/tools/task";
import { getItemDetail } from "@/server/batches/item-detail";
import { toItemPage } from "@/server/batches/projection";
import { listItems } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { agentRuns } from "@/server/db/schema";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { closeMcpClients } from "@/server/tools/mcp";
import { listFiles, putFile } from "@/server/workspace/files";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { seedOwner, startWorkerProcess, stopAllWorkerProcesses, waitForBatch, type WorkerProcess } from "../ops/support";
import { childRuns, harness, simulator } from "../swarm/support";
import { mcpTestServers } from "./support";

/**
 * Every tool group (clock, text, workspace, web, mcp:fs, mcp:memory) driven through the simulator's
 * [[tool:...]] from a `task`, a swarm child and a batch item in a real worker process; the batch
 * item again after its worker is killed (a worker that does not know the definition rebuilds it
 * from the spec); and the items a worker cannot run: a model or group it lacks, an MCP server
 * whose command does not exist.
 */

let t: TestDatabase;
let owner: { userId: string; threadId: string };
let web: http.Server;
let port: number;
const dir = mkdtempSync(path.join(tmpdir(), "flotilla-groups-"));
writeFileSync(path.join(dir, "notes.txt"), "Tide tables for the north pier.");

const servers = mcpTestServers(dir);
const TOOLSMITH = {
  name: "toolsmith",
  description: "Uses every tool group.",
  system_prompt: "Use the tools you are asked to use.",
  tool_groups: ["clock", "text", "workspace", "web", "mcp:fs", "mcp:memory"],
};

function prompt(tag: string): string {
  return [
    `Run ${tag}:`,
    "[[tool:current_time]]",
    '[[tool:count_text {"text":"one two three"}]]',
    '[[tool:read_file {"path":"inbox/brief.txt"}]]',
    `[[tool:write_file {"path":"out/${tag}.md","content":"artifact of ${tag}"}]]`,
    `[[tool:fetch_url {"url":"http://127.0.0.1:${port}/report"}]]`,
    `[[tool:fs__read_text_file {"path":"${path.join(dir, "notes.txt")}"}]]`,
    `[[tool:memory__create_entities {"entities":[{"name":"${tag}","entityType":"run","observations":["seen"]}]}]]`,
  ].join(" ");
}

const TOOL_NAMES = [
  "current_time",
  "count_text",
  "read_file",
  "write_file",
  "fetch_url",
  "fs__read_text_file",
  "memory__create_entities",
];

/** What the final answer must contain: each tool's own output. */
function expectAllOutputs(text: string, tag: string) {
  expect(text).toContain("Ran 7 tool calls.");
  expect(text).toMatch(/current_time:\n\{"now":"20\d\d-/);
  expect(text).toMatch(/count_text:\n\{"characters":13,"words":3,"lines":1\}/);
  expect(text).toContain('read_file:\n{"path":"inbox/brief.txt","offset":0,"text":"Brief: count the ferries."');
  expect(text).toMatch(new RegExp(`write_file:\\n\\{"path":"out/${tag}.md","size":${`artifact of ${tag}`.length},`));
  expect(text).toContain("fetch_url:\n# Pier report");
  expect(text).toContain("fs__read_text_file:\nTide tables for the north pier.");
  expect(text).toContain(`"name": "${tag}"`);
}

const baseConfig = (extra: FlotillaConfigInput = {}): FlotillaConfigInput => ({
  subagent_runtime: { max_running: 8 },
  subagents: { max_per_thread: 32, definitions: [TOOLSMITH] },
  tools: { web_allow_hosts: [`127.0.0.1:${port}`] },
  mcp: { servers },
  simulator: { latency_ms: 0 },
  ...extra,
});

function writeConfig(name: string, input: FlotillaConfigInput): string {
  const file = path.join(dir, name);
  writeFileSync(file, JSON.stringify(input));
  return file;
}

beforeAll(async () => {
  t = await createTestDatabase();
  owner = await seedOwner(t.db);
  const limits = { maxFileBytes: 1 << 20, maxThreadBytes: 1 << 24, maxStorageBytes: 1 << 30 };
  await putFile(t.db, { ...owner, limits }, { path: "inbox/brief.txt", bytes: Buffer.from("Brief: count the ferries."), contentType: "text/plain" });
  web = http.createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(
      "<html><head><title>Pier report</title><script>bad()</script></head><body><article><h1>Pier report</h1>" +
        "<p>The north pier reopened after the storm; ferries run every hour again and the fish market is back.</p>" +
        "</article></body></html>",
    );
  });
  await new Promise<void>((r) => web.listen(0, "127.0.0.1", r));
  port = (web.address() as AddressInfo).port;
});

afterAll(async () => {
  await stopAllWorkerProcesses();
  await closeMcpClients();
  web.closeAllConnections();
  await new Promise((r) => web.close(r));
});

async function runRowOf(id: string) {
  const [row] = await t.db.select().from(agentRuns).where(eq(agentRuns.id, id));
  return row!;
}

/** The artifact a run wrote is in the thread's workspace, attributed to that run. */
async function expectArtifact(tag: string, runId: string) {
  const files = await listFiles(t.db, { ...owner, prefix: "out" });
  expect(files.find((f) => f.path === `out/${tag}.md`)).toMatchObject({ createdByRunId: runId, size: `artifact of ${tag}`.length });
}

function expectRecorded(row: Awaited<ReturnType<typeof runRowOf>>) {
  expect(row.toolCallCount).toBe(7);
  expect(row.toolCalls?.map((c) => [c.name, c.status])).toEqual(TOOL_NAMES.map((n) => [n, "ok"]));
  for (const c of row.toolCalls ?? []) {
    expect(c.duration_ms).toBeGreaterThanOrEqual(0);
    expect(c.result_preview.length).toBeLessThanOrEqual(300);
  }
}

describe("tool groups in every delegation mode", () => {
  it("a task sub-agent calls every group", async () => {
    const config = configSchema.parse(baseConfig());
    const runtime = createSubagentRuntime(config);
    const lead = await createRun(t.db, { ...owner, kind: "lead", definition: "lead", model: "simulator", status: "running" });
    const task = createTaskTool({
      db: t.db,
      config,
      ...owner,
      runId: lead.id,
      model: simulator,
      abortSignal: new AbortController().signal,
      writer: { write: () => {}, merge: () => {}, onError: undefined } as unknown as UIMessageStreamWriter,
      runtime,
    });
    const out = (await task.execute?.(
      { subagent: "toolsmith", description: "all tools", prompt: prompt("task-run") },
      { toolCallId: "call_task", messages: [] },
    )) as { status: string; result: string; runId: string };
    expect(out.status).toBe("completed");
    expectAllOutputs(out.result, "task-run");
    expectRecorded(await runRowOf(out.runId));
    await expectArtifact("task-run", out.runId);
  });

  it("a swarm child calls every group", async () => {
    const config = configSchema.parse(baseConfig());
    const h = await harness(t.db, owner, { config, runtime: createSubagentRuntime(config) });
    const result = await runSwarm(h.ctx, { items: [{ item_id: "all", profile: "toolsmith", task: prompt("swarm-run") }] });
    expect(result.items[0].status).toBe("completed");
    const [child] = await childRuns(t.db, h.ctx.leadRunId);
    expectAllOutputs(child.result ?? "", "swarm-run");
    expectRecorded(child);
    await expectArtifact("swarm-run", child.id);
  });

  let workerA: WorkerProcess;

  it("a batch item in a real worker process calls every group; the item row and detail show the calls", async () => {
    workerA = await startWorkerProcess({
      databaseUrl: t.url,
      env: { FLOTILLA_CONFIG: writeConfig("worker-a.json", baseConfig({ simulator: { latency_ms: 20 } })) },
    });
    const { batch } = await submitBatch(t.db, { ...batchSubagent(configSchema.parse(baseConfig()), "toolsmith"),
      ...owner,
      config: configSchema.parse(baseConfig()),
      model: { name: "simulator", simulator: true },
      input: { submission_key: "groups-1", subagent: "toolsmith", items: [{ item_key: "all", prompt: prompt("batch-run") }] },
    });
    const done = await waitForBatch(t.db, batch.id, 60_000);
    expect(done).toMatchObject({ status: "completed", succeeded: 1 });
    const page = toItemPage(await listItems(t.db, { ...owner, batchId: batch.id }));
    expect(page.items[0]).toMatchObject({ status: "succeeded", tool_calls: 7 });
    const detail = await getItemDetail(t.db, { ...owner, batchId: batch.id, itemId: page.items[0].id });
    expect(detail.tool_call_list.map((c) => c.name)).toEqual(TOOL_NAMES);
    const [run] = await t.db.select().from(agentRuns).where(eq(agentRuns.kind, "batch_item"));
    expectAllOutputs(run.result ?? "", "batch-run");
    await expectArtifact("batch-run", run.id);
    // Another user does not see the item.
    const stranger = await seedOwner(t.db);
    await expect(
      getItemDetail(t.db, { ...stranger, batchId: batch.id, itemId: page.items[0].id }),
    ).rejects.toMatchObject({ code: "not_found" });
  }, 90_000);

  let workerB: WorkerProcess;

  it("the same item's tools after its worker is killed: a worker without the definition rebuilds it from the spec", async () => {
    const slow = `${prompt("restart-run")} [[sleep:700]]`;
    const { batch } = await submitBatch(t.db, { ...batchSubagent(configSchema.parse(baseConfig()), "toolsmith"),
      ...owner,
      config: configSchema.parse(baseConfig()),
      model: { name: "simulator", simulator: true },
      input: { submission_key: "groups-restart", subagent: "toolsmith", items: [{ item_key: "slow", prompt: slow }] },
    });
    // Wait until worker A runs it, then kill it without a chance to hand the item back.
    const deadline = Date.now() + 30_000;
    for (;;) {
      const [row] = await t.db.select().from(agentRuns).where(eq(agentRuns.prompt, slow));
      if (row?.status === "running") break;
      if (Date.now() > deadline) throw new Error("the item never started on worker A");
      await new Promise((r) => setTimeout(r, 50));
    }
    process.kill(-workerA.pid, "SIGKILL");
    // Worker B's configuration has no "toolsmith" at all, and an MCP server whose command is missing.
    workerB = await startWorkerProcess({
      databaseUrl: t.url,
      env: {
        FLOTILLA_CONFIG: writeConfig(
          "worker-b.json",
          baseConfig({
            subagents: { max_per_thread: 32, definitions: [] },
            mcp: { servers: { ...servers, ghost: { command: path.join(dir, "no-such-mcp-server") } } },
            simulator: { latency_ms: 20 },
          }),
        ),
      },
    });
    const done = await waitForBatch(t.db, batch.id, 60_000);
    expect(done).toMatchObject({ status: "completed", succeeded: 1 });
    const page = toItemPage(await listItems(t.db, { ...owner, batchId: batch.id }));
    expect(page.items[0]).toMatchObject({ attempts: 2, tool_calls: 7 });
    const runs = await t.db.select().from(agentRuns).where(eq(agentRuns.prompt, slow));
    const finished = runs.find((r) => r.status === "completed")!;
    expectAllOutputs(finished.result ?? "", "restart-run");
    expectRecorded(finished);
    // Written by the run on worker B (worker A's attempt, if it got that far, is overwritten).
    await expectArtifact("restart-run", finished.id);
  }, 120_000);

  it("a worker without the batch's model or group fails the item with model_unavailable / tool_unavailable and keeps running", async () => {
    // The submitting process knows a priced model and two more groups; worker B has neither the
    // model nor "mcp:elsewhere", and its "ghost" server cannot start.
    const submitter = configSchema.parse(
      baseConfig({
        subagent_batches: { max_attempts: 1 },
        models: [{ name: "fast", base_url: "http://127.0.0.1:9/v1", model: "fast-1", price_per_million_input: 1 }],
        mcp: {
          servers: {
            ...servers,
            ghost: { command: path.join(dir, "no-such-mcp-server") },
            elsewhere: { command: "mcp-elsewhere" },
          },
        },
        subagents: {
          max_per_thread: 32,
          definitions: [
            { ...TOOLSMITH, name: "priced", model: "fast" },
            { ...TOOLSMITH, name: "ghosty", tool_groups: ["clock", "mcp:ghost"] },
            { ...TOOLSMITH, name: "remote", tool_groups: ["mcp:elsewhere"] },
          ],
        },
      }),
    );
    const submit = async (subagent: string) =>
      (
        await submitBatch(t.db, { ...batchSubagent(submitter, subagent),
          ...owner,
          config: submitter,
          model: { name: "simulator", simulator: true },
          input: { submission_key: `groups-${subagent}`, subagent, items: ["[[tool:current_time]]"] },
        })
      ).batch;
    const priced = await submit("priced");
    const ghosty = await submit("ghosty");
    const remote = await submit("remote");
    const errorOf = async (batchId: string) => {
      expect(await waitForBatch(t.db, batchId, 60_000)).toMatchObject({ status: "failed", failed: 1 });
      return toItemPage(await listItems(t.db, { ...owner, batchId })).items[0].error;
    };
    expect(await errorOf(priced.id)).toMatch(/^model_unavailable: model "fast" is not in this process's catalog/);
    expect(await errorOf(ghosty.id)).toMatch(/^tool_unavailable: MCP server "ghost" is unavailable: .*ENOENT/);
    expect(await errorOf(remote.id)).toMatch(/^tool_unavailable: tool group "mcp:elsewhere" is not available in this process/);
    // Never a silent fallback: no run of the priced batch answered on another model.
    const pricedRuns = await t.db.select().from(agentRuns).where(eq(agentRuns.definition, "priced"));
    expect(pricedRuns).toHaveLength(0);
    expect(workerB.running()).toBe(true);
    // The worker still serves: a good batch after the failures completes.
    const { batch } = await submitBatch(t.db, { ...batchSubagent(configSchema.parse(baseConfig()), "toolsmith"),
      ...owner,
      config: configSchema.parse(baseConfig()),
      model: { name: "simulator", simulator: true },
      input: { submission_key: "groups-after", subagent: "toolsmith", items: ['[[tool:count_text {"text":"ok"}]]'] },
    });
    expect(await waitForBatch(t.db, batch.id, 60_000)).toMatchObject({ status: "completed", succeeded: 1 });
  }, 120_000);

  it("an MCP server killed inside a worker is started again on the next item that uses it", async () => {
    // Worker B started its filesystem server for the toolsmith items above; kill it from outside.
    const fsServers = () =>
      execFileSync("pgrep", ["-P", String(workerB.pid), "-f", "server-filesystem"], { encoding: "utf8" })
        .trim()
        .split("\n")
        .filter(Boolean)
        .map(Number);
    const [before] = fsServers();
    expect(before).toBeGreaterThan(0);
    process.kill(before, "SIGKILL");
    const { batch } = await submitBatch(t.db, { ...batchSubagent(configSchema.parse(baseConfig()), "toolsmith"),
      ...owner,
      config: configSchema.parse(baseConfig()),
      model: { name: "simulator", simulator: true },
      input: { submission_key: "groups-after-kill", subagent: "toolsmith", items: [{ item_key: "again", prompt: prompt("after-kill") }] },
    });
    expect(await waitForBatch(t.db, batch.id, 60_000)).toMatchObject({ status: "completed", succeeded: 1 });
    const page = toItemPage(await listItems(t.db, { ...owner, batchId: batch.id }));
    expect(page.items[0]).toMatchObject({ attempts: 1, tool_calls: 7 });
    const after = fsServers();
    expect(after).toHaveLength(1);
    expect(after[0]).not.toBe(before);
    expect(workerB.running()).toBe(true);
  }, 90_000);
});
