import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createThread } from "@/server/chat/threads";
import { initTelemetry, shutdownTelemetry } from "@/server/telemetry";
import { makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";
import { type Receiver, startReceiver } from "./receiver";

/**
 * Traces of a web process: a lead chat turn that delegates one task, over a real socket (the
 * production front door before the route handlers). The SDK starts in this process through the
 * same module the web process uses (server/telemetry), exporting http/json to a local receiver.
 */

const SERVER = 2; // OTLP SpanKind
const tdb = await setupApiDatabase();
let server: WebServer;
let receiver: Receiver;
let alice: TestUser;

beforeAll(async () => {
  receiver = await startReceiver();
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.endpoint;
  process.env.OTEL_EXPORTER_OTLP_PROTOCOL = "http/json";
  await initTelemetry("flotilla-web");
  server = await startWebServer({ preload: ["/api/threads/[threadId]/chat"] });
  alice = await makeUser(tdb, "traces");
});
afterAll(async () => {
  await server?.close();
  await shutdownTelemetry();
  await receiver?.close();
  delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  delete process.env.OTEL_EXPORTER_OTLP_PROTOCOL;
});

/** One chat turn in a new thread, its answer read to the end; returns the thread id. */
async function turn(messageId: string, text: string): Promise<string> {
  const threadId = (await createThread(tdb.db, { userId: alice.userId })).id;
  const res = await fetch(`${server.origin}/api/threads/${threadId}/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${alice.token}`, "content-type": "application/json" },
    body: JSON.stringify({ message: { id: messageId, role: "user", parts: [{ type: "text", text }] } }),
  });
  expect(res.status).toBe(200);
  await res.text();
  return threadId;
}

describe("traces of a lead chat turn", () => {
  it("POST server span → invoke_agent lead → chat and execute_tool task → invoke_agent of the task's sub-agent; a swarm's children", async () => {
    await workerAlive(tdb);
    const threadId = await turn("u-traces-1", "task: count the words of a b c");
    const swarmThreadId = await turn("u-traces-2", "swarm: Summarize {{item}} | alpha; beta");
    await shutdownTelemetry(); // flushes what the batch processor still holds

    const spans = receiver.spans();
    const lead = spans.find((s) => s.name === "invoke_agent lead" && s.attributes["gen_ai.conversation.id"] === threadId);
    expect(lead, JSON.stringify(spans.map((s) => s.name))).toBeDefined();
    expect(lead!.service).toBe("flotilla-web");
    expect(lead!.attributes).toMatchObject({ "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "lead", "gen_ai.request.model": "simulator" });
    expect(String(lead!.attributes["flotilla.run.id"])).toMatch(/^[0-9a-f-]{36}$/);
    expect(lead!.attributes["gen_ai.usage.output_tokens"]).toBeGreaterThan(0);

    // The request that started it: one SERVER span, the lead its child.
    const request = spans.find((s) => s.spanId === lead!.parentSpanId);
    expect(request).toMatchObject({ name: "POST", kind: SERVER, traceId: lead!.traceId });
    expect(request!.attributes).toMatchObject({
      "http.request.method": "POST",
      "url.path": `/api/threads/${threadId}/chat`,
      "http.response.status_code": 200,
    });

    const inTrace = spans.filter((s) => s.traceId === lead!.traceId);
    const leadChats = inTrace.filter((s) => s.name === "chat simulator" && s.parentSpanId === lead!.spanId);
    expect(leadChats.length).toBeGreaterThanOrEqual(2); // the task call, then the answer
    const taskCall = inTrace.find((s) => s.name === "execute_tool task");
    expect(taskCall).toBeDefined();
    expect(taskCall!.attributes).toMatchObject({ "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "task" });
    expect([lead!.spanId, ...leadChats.map((c) => c.spanId)]).toContain(taskCall!.parentSpanId);

    // The task's run: its own invoke_agent under the tool call, its own model call under it.
    const child = inTrace.find((s) => s.parentSpanId === taskCall!.spanId && s.name.startsWith("invoke_agent "));
    expect(child).toBeDefined();
    expect(child!.attributes).toMatchObject({ "gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": threadId });
    expect(child!.attributes["flotilla.run.id"]).not.toBe(lead!.attributes["flotilla.run.id"]);
    expect(inTrace.some((s) => s.name === "chat simulator" && s.parentSpanId === child!.spanId)).toBe(true);

    // A swarm: one invoke_agent per child under the agent_swarm call, each with its own run id.
    const swarmLead = spans.find((s) => s.name === "invoke_agent lead" && s.attributes["gen_ai.conversation.id"] === swarmThreadId);
    const swarmCall = spans.find((s) => s.name === "execute_tool agent_swarm" && s.traceId === swarmLead?.traceId);
    expect(swarmCall).toBeDefined();
    const swarmChildren = spans.filter((s) => s.parentSpanId === swarmCall!.spanId && s.name.startsWith("invoke_agent "));
    expect(swarmChildren).toHaveLength(2);
    expect(new Set(swarmChildren.map((c) => c.attributes["flotilla.run.id"])).size).toBe(2);
    for (const c of swarmChildren) expect(c.attributes["gen_ai.conversation.id"]).toBe(swarmThreadId);
  }, 60_000);
});
