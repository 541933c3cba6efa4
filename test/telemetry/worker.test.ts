import { type ChildProcess, spawn } from "node:child_process";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchSubagent } from "@/server/agent/registry";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { makeOwner, SIM_MODEL, sleep, testConfig } from "../batches/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { type Receiver, type ReceivedSpan, startReceiver } from "./receiver";

/**
 * Traces from a real worker process (server/worker/main.ts): a 2-item simulator batch whose items
 * call a tool, exported to a local OTLP receiver over http/json and http/protobuf; and with
 * OTEL_EXPORTER_OTLP_ENDPOINT unset, the SDK is never loaded.
 */

let t: TestDatabase;
let receiver: Receiver;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  t = await createTestDatabase();
  receiver = await startReceiver();
});

afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  await receiver?.close();
});

const baseEnv = () =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_") && !k.startsWith("OTEL_")));

function spawnNode(args: string[], env: Record<string, string>): ChildProcess {
  const child = spawn(process.execPath, ["--import", "tsx", ...args], {
    cwd: process.cwd(),
    env: { ...baseEnv(), DATABASE_URL: t.url, LOG_LEVEL: "warn", NODE_ENV: "production", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  child.on("exit", () => children.delete(child));
  return child;
}

const exited = (child: ChildProcess) => new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));

const config = testConfig({
  simulator: { latency_ms: 5 },
  subagents: { definitions: [{ name: "counter", description: "Counts.", system_prompt: "Count.", tool_groups: ["text"] }] },
});

/** Runs a 2-item batch (each item calls count_text once) on a worker with `env`; SIGTERM flushes its spans. */
async function runBatchOnWorker(key: string, env: Record<string, string>) {
  const owner = await makeOwner(t.db);
  const { batch } = await submitBatch(t.db, {
    ...batchSubagent(config, "counter"),
    ...owner,
    input: {
      submission_key: key,
      subagent: "counter",
      items: [`one [[tool:count_text {"text":"a b"}]]`, `two [[tool:count_text {"text":"c d e"}]]`],
    },
    config,
    model: SIM_MODEL,
  });
  const worker = spawnNode(["server/worker/main.ts"], { FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.05", ...env });
  const deadline = Date.now() + 60_000;
  for (;;) {
    const b = await getBatch(t.db, { ...owner, batchId: batch.id });
    if (b.status === "completed") break;
    if (Date.now() > deadline) throw new Error(`batch still ${b.status}`);
    await sleep(100);
  }
  const exit = exited(worker);
  worker.kill("SIGTERM");
  expect(await exit).toBe(0);
  const items = await t.db.execute<{ id: string; run_id: string }>(
    sql`select id, run_id from subagent_batch_items where batch_id = ${batch.id} order by position`,
  );
  return { batch, owner, items: [...items] };
}

function assertBatchTrace(spans: ReceivedSpan[], run: Awaited<ReturnType<typeof runBatchOnWorker>>) {
  const agents = spans.filter((s) => s.attributes["flotilla.batch.id"] === run.batch.id);
  expect(agents).toHaveLength(2);
  for (const item of run.items) {
    const agent = agents.find((s) => s.attributes["flotilla.item.id"] === item.id);
    expect(agent, `invoke_agent span of item ${item.id}`).toBeDefined();
    expect(agent!.name).toBe("invoke_agent counter");
    expect(agent!.service).toBe("flotilla-worker");
    expect(agent!.attributes).toMatchObject({
      "gen_ai.operation.name": "invoke_agent",
      "gen_ai.agent.name": "counter",
      "gen_ai.request.model": "simulator",
      "gen_ai.conversation.id": run.owner.threadId,
      "flotilla.run.id": item.run_id,
    });
    expect(agent!.attributes["gen_ai.usage.input_tokens"]).toBeGreaterThan(0);
    expect(agent!.attributes["gen_ai.usage.output_tokens"]).toBeGreaterThan(0);
    const children = spans.filter((s) => s.parentSpanId === agent!.spanId);
    const chats = children.filter((s) => s.name === "chat simulator");
    // The tool call, then the answer: two model calls under the run.
    expect(chats.length).toBe(2);
    for (const chat of chats) {
      expect(chat.traceId).toBe(agent!.traceId);
      expect(chat.attributes).toMatchObject({ "gen_ai.operation.name": "chat", "gen_ai.request.model": "simulator" });
      expect(chat.attributes["gen_ai.usage.input_tokens"]).toBeGreaterThan(0);
    }
    const tools = spans.filter((s) => s.name === "execute_tool count_text" && s.traceId === agent!.traceId);
    expect(tools).toHaveLength(1);
    expect(tools[0]!.attributes).toMatchObject({ "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "count_text" });
    expect(String(tools[0]!.attributes["gen_ai.tool.call.id"])).not.toBe("");
    expect(tools[0]!.attributes["error.type"]).toBeUndefined();
    // Under the run, directly or through the model call that asked for it.
    const parent = spans.find((s) => s.spanId === tools[0]!.parentSpanId);
    expect([agent!.spanId, ...chats.map((c) => c.spanId)]).toContain(parent?.spanId);
  }
}

describe("traces from a worker process", () => {
  it("http/json: invoke_agent per item with batch, item and run ids; chat and execute_tool spans beneath", async () => {
    receiver.requests.length = 0;
    const run = await runBatchOnWorker("json", { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" });
    expect(receiver.requests.length).toBeGreaterThan(0);
    for (const r of receiver.requests) {
      expect(r.path).toBe("/v1/traces");
      expect(r.contentType).toContain("application/json");
    }
    assertBatchTrace(receiver.spans(), run);
  }, 120_000);

  it("http/protobuf (the default): the same spans, as application/x-protobuf", async () => {
    receiver.requests.length = 0;
    const run = await runBatchOnWorker("protobuf", { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint });
    expect(receiver.requests.length).toBeGreaterThan(0);
    for (const r of receiver.requests) expect(r.contentType).toBe("application/x-protobuf");
    const bytes = Buffer.concat(receiver.requests.map((r) => r.body)).toString("latin1");
    for (const name of ["invoke_agent counter", "chat simulator", "execute_tool count_text"]) expect(bytes).toContain(name);
    assertBatchTrace(receiver.spans(), run);
  }, 120_000);

  it("unset: the worker exports nothing", async () => {
    receiver.requests.length = 0;
    await runBatchOnWorker("off", {});
    await sleep(500);
    expect(receiver.requests).toHaveLength(0);
  }, 120_000);
});

describe("the SDK is loaded only when asked for", () => {
  const loadedPackages = async (env: Record<string, string>) => {
    const child = spawnNode(["test/telemetry/probe.ts"], env);
    let out = "";
    child.stdout?.on("data", (d) => (out += String(d)));
    expect(await exited(child)).toBe(0);
    return new Set<string>(JSON.parse(out.trim()));
  };

  it("unset: no SDK or exporter module is loaded; set: they are", async () => {
    expect(await loadedPackages({})).toEqual(new Set());
    const on = await loadedPackages({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint });
    expect(on).toContain("sdk-trace-node");
    expect(on).toContain("exporter-trace-otlp-proto");
  }, 60_000);
});
