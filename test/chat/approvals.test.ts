import { and, asc, eq, sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chatApprovalsSchema } from "@/lib/api/approvals";
import type { ToolCallRecord } from "@/lib/api/runs";
import { decideChatApproval } from "@/server/agent/chat-approvals";
import { continueDecidedReply, sweepChatApprovals } from "@/server/chat/approval-continuation";
import { loadMessages } from "@/server/chat/messages";
import { getConfig } from "@/server/config/load";
import { createDatabase } from "@/server/db/client";
import { agentRuns, chatStreamChunks, chatStreams, toolApprovals } from "@/server/db/schema";
import { resolveModel } from "@/server/models";
import { recoverOnStartup } from "@/server/startup";
import { listFiles } from "@/server/workspace/files";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";
import { waitUntil } from "../loop/support";

/**
 * Approvals in the chat, over a real socket (the route handlers behind the front door), real
 * PostgreSQL and the simulator: the lead's call ends its reply on a card and the decision goes
 * on in the same reply; a task child's call waits for its decision without its capacity slot.
 * tools.require_approval: the lead's workspace/write_file and the children's clock group.
 */

process.env.FLOTILLA__SIMULATOR__LATENCY_MS = "20";
process.env.FLOTILLA__TOOLS__REQUIRE_APPROVAL = JSON.stringify(["workspace/write_file", "clock"]);
process.env.FLOTILLA__LEAD__TOOL_GROUPS = JSON.stringify(["workspace"]);
process.env.FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING = "1";
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
const t = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let bob: TestUser;

beforeAll(async () => {
  server = await startWebServer({
    preload: ["/api/threads/[threadId]/chat", "/api/threads/[threadId]/approvals", "/api/threads/[threadId]/approvals/[approvalId]"],
  });
  alice = await makeUser(t, "alice");
  bob = await makeUser(t, "bob");
});
afterAll(async () => {
  await waitUntil("no active response", async () => ((await activeStreams()) === 0 ? true : undefined), 30_000).catch(() => {});
  await server?.close();
});

let seq = 0;
function post(threadId: string, text: string, user = alice) {
  const message = { id: `u${Date.now().toString(36)}x${++seq}`, role: "user", parts: [{ type: "text", text }] };
  return fetch(`${server.origin}/api/threads/${threadId}/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify({ message }),
  });
}

async function approvals(threadId: string, user = alice) {
  const res = await fetch(`${server.origin}/api/threads/${threadId}/approvals`, { headers: { authorization: `Bearer ${user.token}` } });
  return { status: res.status, body: res.status === 200 ? chatApprovalsSchema.parse(await res.json()).approvals : await res.json() };
}

function decide(threadId: string, approvalId: string, body: unknown, user = alice) {
  return fetch(`${server.origin}/api/threads/${threadId}/approvals/${approvalId}`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function activeStreams(threadId?: string): Promise<number> {
  const [row] = await t.db
    .select({ n: sql<number>`count(*)::int` })
    .from(chatStreams)
    .where(and(eq(chatStreams.status, "active"), threadId ? eq(chatStreams.threadId, threadId) : undefined));
  return row?.n ?? 0;
}

async function idle(threadId: string): Promise<void> {
  await waitUntil("the thread is idle", async () => ((await activeStreams(threadId)) === 0 ? true : undefined), 60_000, 50);
}

/** The one waiting call of the thread, once it is listed. */
async function waitingCall(threadId: string) {
  return waitUntil(
    "a call waits",
    async () => {
      const { body } = await approvals(threadId);
      return Array.isArray(body) && body.length > 0 ? body[0]! : undefined;
    },
    30_000,
    50,
  );
}

type Part = { type: string; state?: string; toolCallId?: string; input?: unknown; output?: unknown; errorText?: string; approval?: Record<string, unknown>; text?: string };
const partsOf = (m: { parts: unknown[] }) => m.parts as Part[];
const textOf = (m: { parts: unknown[] }) => partsOf(m).filter((p) => p.type === "text").map((p) => p.text).join("");

async function leadRuns(threadId: string) {
  return t.db
    .select({ id: agentRuns.id, status: agentRuns.status })
    .from(agentRuns)
    .where(and(eq(agentRuns.threadId, threadId), eq(agentRuns.kind, "lead")))
    .orderBy(asc(agentRuns.createdAt));
}

/** How many times the thread's streams delivered a result for this call. */
async function resultChunks(threadId: string, toolCallId: string): Promise<number> {
  const rows = await t.db
    .select({ chunk: chatStreamChunks.chunk })
    .from(chatStreamChunks)
    .innerJoin(chatStreams, eq(chatStreams.id, chatStreamChunks.streamId))
    .where(eq(chatStreams.threadId, threadId));
  return rows.filter((r) => {
    const c = r.chunk as { type?: string; toolCallId?: string };
    return c.toolCallId === toolCallId && (c.type === "tool-output-available" || c.type === "tool-output-error");
  }).length;
}

const WRITE = 'Save it [[tool:write_file {"path":"notes/plan.md","content":"hello"}]]';

describe("a lead call that needs a person", () => {
  it("ends the reply on a waiting card; approve runs it once and the same reply goes on; a second decision is 409", async () => {
    const threadId = await makeThread(t, alice);
    const res = await post(threadId, WRITE);
    expect(res.status).toBe(200);
    await res.text();
    await idle(threadId);

    const call = await waitingCall(threadId);
    expect(call).toMatchObject({ kind: "lead", tool: "write_file", input: { path: "notes/plan.md", content: "hello" } });
    const runs = await leadRuns(threadId);
    expect(call.run_id).toBe(runs[0]!.id);
    // It expires after tools.approval_timeout_seconds (the default day).
    expect(new Date(call.expires_at).getTime() - new Date(call.created_at).getTime()).toBe(86_400_000);
    // Nothing ran; the stored reply shows the request (what a reload renders).
    expect(await listFiles(t.db, { userId: alice.userId, threadId })).toEqual([]);
    const [, reply] = await loadMessages(t.db, { threadId });
    const part = partsOf(reply!).find((p) => p.type === "tool-write_file")!;
    expect(part.state).toBe("approval-requested");
    expect(part.toolCallId).toBe(call.tool_call_id);

    // The thread waits for the person: a new message queues behind the decision.
    const queued = await post(threadId, "[[echo]] after the decision");
    expect(queued.status).toBe(202);

    const ok = await decide(threadId, call.id, { decision: "approve" });
    expect(ok.status).toBe(200);
    expect((await ok.json()).approval).toMatchObject({ id: call.id, tool: "write_file", status: "approved", reason: null });
    await waitUntil("the queued message was answered", async () => ((await loadMessages(t.db, { threadId })).length === 4 ? true : undefined), 60_000, 50);
    await idle(threadId);

    const files = await listFiles(t.db, { userId: alice.userId, threadId });
    expect(files.map((f) => f.path)).toEqual(["notes/plan.md"]);
    const stored = await loadMessages(t.db, { threadId });
    expect(stored.map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
    // The same reply went on: its call has its output, and the model's answer follows it.
    const done = partsOf(stored[1]!).find((p) => p.type === "tool-write_file")!;
    expect(done.state).toBe("output-available");
    expect(textOf(stored[1]!)).toMatch(/Ran 1 tool call\.\s+write_file:/);
    expect(textOf(stored[3]!)).toBe("after the decision");
    expect(await resultChunks(threadId, call.tool_call_id)).toBe(1);
    expect((await leadRuns(threadId)).map((r) => r.status)).toEqual(["completed", "completed", "completed"]);

    const again = await decide(threadId, call.id, { decision: "deny" });
    expect(again.status).toBe(409);
    expect((await again.json()).error.message).toBe("approval: already approved");
    expect((await approvals(threadId)).body).toEqual([]);
  });

  it("deny reaches the model as “denied by the user: <reason>” and the call never runs", async () => {
    const threadId = await makeThread(t, alice);
    await (await post(threadId, WRITE)).text();
    const call = await waitingCall(threadId);
    const res = await decide(threadId, call.id, { decision: "deny", reason: "not in this folder" });
    expect(res.status).toBe(200);
    expect((await res.json()).approval).toMatchObject({ status: "denied", reason: "not in this folder" });
    await waitUntil("the reply went on", async () => ((await leadRuns(threadId)).length === 2 ? true : undefined), 30_000, 50);
    await idle(threadId);
    const [, reply] = await loadMessages(t.db, { threadId });
    const part = partsOf(reply!).find((p) => p.type === "tool-write_file")!;
    expect(part.state).toBe("output-denied");
    expect(part.approval).toMatchObject({ approved: false, reason: "denied by the user: not in this folder" });
    // The simulator quotes what the model read for the call.
    expect(textOf(reply!)).toContain("write_file:\nerror: denied by the user: not in this folder");
    expect(await listFiles(t.db, { userId: alice.userId, threadId })).toEqual([]);
  });

  it("two approvals at once: exactly one 200, the other 409, and the call runs once", async () => {
    const threadId = await makeThread(t, alice);
    await (await post(threadId, WRITE)).text();
    const call = await waitingCall(threadId);
    const answers = await Promise.all([decide(threadId, call.id, { decision: "approve" }), decide(threadId, call.id, { decision: "approve" })]);
    expect(answers.map((r) => r.status).sort()).toEqual([200, 409]);
    await waitUntil("the reply went on", async () => ((await leadRuns(threadId)).length === 2 ? true : undefined), 30_000, 50);
    await idle(threadId);
    // A sweep afterwards (another process) starts nothing more.
    const config = getConfig();
    expect(await sweepChatApprovals(t.db, { config, model: resolveModel(config) })).toBe(0);
    expect((await leadRuns(threadId)).length).toBe(2);
    expect(await resultChunks(threadId, call.tool_call_id)).toBe(1);
  });

  it("a forged call changes nothing: edited stored arguments run as approved, an edited reply is refused, posted arguments are 400", async () => {
    // The row's shown arguments edited: the call runs with the arguments the model gave.
    const threadId = await makeThread(t, alice);
    await (await post(threadId, WRITE)).text();
    const call = await waitingCall(threadId);
    await t.db.update(toolApprovals).set({ input: { path: "evil.md", content: "x" } }).where(eq(toolApprovals.id, call.id));

    const forged = await decide(threadId, call.id, { decision: "approve", input: { path: "evil.md", content: "x" } });
    expect(forged.status).toBe(400);
    expect((await forged.json()).error.message).toMatch(/input/);
    expect((await approvals(threadId)).body).toHaveLength(1);

    expect((await decide(threadId, call.id, { decision: "approve" })).status).toBe(200);
    await waitUntil("the reply went on", async () => ((await leadRuns(threadId)).length === 2 ? true : undefined), 30_000, 50);
    await idle(threadId);
    expect((await listFiles(t.db, { userId: alice.userId, threadId })).map((f) => f.path)).toEqual(["notes/plan.md"]);

    // The stored reply's arguments edited after the request: the hash differs and the call is refused.
    const other = await makeThread(t, alice);
    await (await post(other, WRITE)).text();
    const second = await waitingCall(other);
    await t.db.execute(sql`
      update messages set parts = replace(parts::text, '"notes/plan.md"', '"evil.md"')::jsonb
       where thread_id = ${other} and role = 'assistant'`);
    expect((await decide(other, second.id, { decision: "approve" })).status).toBe(200);
    await waitUntil("the reply went on", async () => ((await leadRuns(other)).length === 2 ? true : undefined), 30_000, 50);
    await idle(other);
    const [, reply] = await loadMessages(t.db, { threadId: other });
    const part = partsOf(reply!).find((p) => p.type === "tool-write_file")!;
    expect(part.state).toBe("output-error");
    expect(part.errorText).toMatch(/arguments differ from the ones the person approved/);
    expect(await listFiles(t.db, { userId: alice.userId, threadId: other })).toEqual([]);
  });

  it("another user gets 404 for the list and the decision; bad bodies are 400 naming the field and decide nothing", async () => {
    const threadId = await makeThread(t, alice);
    await (await post(threadId, WRITE)).text();
    const call = await waitingCall(threadId);
    expect((await approvals(threadId, bob)).status).toBe(404);
    expect((await decide(threadId, call.id, { decision: "approve" }, bob)).status).toBe(404);
    const bobThread = await makeThread(t, bob);
    expect((await decide(bobThread, call.id, { decision: "approve" }, bob)).status).toBe(404);
    expect((await decide(threadId, "00000000-0000-0000-0000-000000000000", { decision: "approve" })).status).toBe(404);
    expect((await decide(threadId, "nope", { decision: "approve" })).status).toBe(404);

    const bad = await decide(threadId, call.id, { decision: "maybe" });
    expect(bad.status).toBe(400);
    expect((await bad.json()).error.message).toBe('decision: must be "approve" or "deny"');
    const long = await decide(threadId, call.id, { decision: "deny", reason: "x".repeat(2001) });
    expect(long.status).toBe(400);
    expect((await long.json()).error.message).toBe("reason: must be at most 2000 characters");
    expect((await approvals(threadId)).body).toHaveLength(1);
    expect((await decide(threadId, call.id, { decision: "deny", reason: "x".repeat(2000) })).status).toBe(200);
    await waitUntil("the reply went on", async () => ((await leadRuns(threadId)).length === 2 ? true : undefined), 30_000, 50);
    await idle(threadId);
  });

  it("Stop, a restart and another web process leave the decision possible; the other process continues the reply once", async () => {
    const threadId = await makeThread(t, alice);
    await (await post(threadId, WRITE)).text();
    const call = await waitingCall(threadId);
    // Stop on the run that asked, then a restart's recovery: the call still waits.
    const stop = await fetch(`${server.origin}/api/threads/${threadId}/runs/${call.run_id}/stop`, {
      method: "POST",
      headers: { authorization: `Bearer ${alice.token}` },
    });
    expect(stop.status).toBe(200);
    await recoverOnStartup(new Date());
    expect((await approvals(threadId)).body).toEqual([call]);

    // Another web process (its own database client) takes the decision and starts the reply.
    const other = createDatabase(t.url, { applicationName: "flotilla-web-b" });
    try {
      const config = getConfig();
      const decided = await decideChatApproval(other.db, { userId: alice.userId, threadId, approvalId: call.id, decision: "approve" });
      expect(decided.kind).toBe("lead");
      const started = await continueDecidedReply(other.db, { config, model: resolveModel(config), threadId });
      expect(started).not.toBeNull();
      // This process's sweep, at the same moment, finds nothing to start.
      expect(await sweepChatApprovals(t.db, { config, model: resolveModel(config) })).toBe(0);
      await started!.done;
    } finally {
      await other.close();
    }
    await idle(threadId);
    expect((await listFiles(t.db, { userId: alice.userId, threadId })).map((f) => f.path)).toEqual(["notes/plan.md"]);
    expect((await leadRuns(threadId)).length).toBe(2);
    expect(await resultChunks(threadId, call.tool_call_id)).toBe(1);
  });

  it("tools.approval_timeout_seconds denies a lead call: the sweep carries the denial to the model", async () => {
    const threadId = await makeThread(t, alice);
    await (await post(threadId, WRITE)).text();
    const call = await waitingCall(threadId);
    // Its time passes (the row's expiry is what every process reads).
    await t.db.update(toolApprovals).set({ expiresAt: sql`now() - interval '1 second'` }).where(eq(toolApprovals.id, call.id));
    const config = getConfig();
    expect(await sweepChatApprovals(t.db, { config, model: resolveModel(config) })).toBe(1);
    await idle(threadId);
    const [, reply] = await loadMessages(t.db, { threadId });
    const part = partsOf(reply!).find((p) => p.type === "tool-write_file")!;
    expect(part.state).toBe("output-denied");
    expect(textOf(reply!)).toContain("error: denied by the user: no decision within 86400 s (tools.approval_timeout_seconds)");
    expect((await decide(threadId, call.id, { decision: "approve" })).status).toBe(409);
  });
});

/** The tool calls a child run recorded. */
async function childCalls(runId: string): Promise<ToolCallRecord[]> {
  const [row] = await t.db.select({ calls: agentRuns.toolCalls }).from(agentRuns).where(eq(agentRuns.id, runId));
  return (row?.calls ?? []) as ToolCallRecord[];
}

describe("a task child's call that needs a person", () => {
  it("waits inside the running reply; deny reaches the child as “denied by the user: <reason>”", async () => {
    const threadId = await makeThread(t, alice);
    const res = await post(threadId, "task: What time is it? [[tool:current_time {}]]");
    const body = res.text();
    const call = await waitingCall(threadId);
    expect(call).toMatchObject({ kind: "child", tool: "current_time", input: {} });
    const [child] = await t.db.select().from(agentRuns).where(eq(agentRuns.id, call.run_id));
    expect(child).toMatchObject({ kind: "task", status: "running", threadId });
    const denied = await decide(threadId, call.id, { decision: "deny", reason: "no clocks today" });
    expect(denied.status).toBe(200);
    await body;
    await idle(threadId);
    const calls = await childCalls(call.run_id);
    expect(calls.map((c) => [c.name, c.status, c.result_preview])).toEqual([["current_time", "error", "denied by the user: no clocks today"]]);
    const [done] = await t.db.select().from(agentRuns).where(eq(agentRuns.id, call.run_id));
    expect(done!.status).toBe("completed");
    expect(done!.result).toContain("error: denied by the user: no clocks today");
    expect((await decide(threadId, call.id, { decision: "approve" })).status).toBe(409);
  });

  it("holds no capacity slot while it waits: with max_running 1 another task runs meanwhile; approved, it runs once", async () => {
    const waiting = await makeThread(t, alice);
    const first = post(waiting, "task: What time is it? [[tool:current_time {}]]");
    const call = await waitingCall(waiting);

    const other = await makeThread(t, alice);
    const res = await post(other, "task: [[echo]] done meanwhile");
    expect(res.status).toBe(200);
    await res.text();
    await idle(other);
    const [otherChild] = await t.db
      .select()
      .from(agentRuns)
      .where(and(eq(agentRuns.threadId, other), eq(agentRuns.kind, "task")));
    expect(otherChild!.status).toBe("completed");
    // Still waiting meanwhile.
    expect((await approvals(waiting)).body).toHaveLength(1);

    expect((await decide(waiting, call.id, { decision: "approve" })).status).toBe(200);
    await (await first).text();
    await idle(waiting);
    const calls = await childCalls(call.run_id);
    expect(calls.map((c) => [c.name, c.status])).toEqual([["current_time", "ok"]]);
  });

  it("times out into a denial (the row's expiry)", async () => {
    const threadId = await makeThread(t, alice);
    const res = post(threadId, "task: What time is it? [[tool:current_time {}]]");
    const call = await waitingCall(threadId);
    await t.db.update(toolApprovals).set({ expiresAt: sql`now()` }).where(eq(toolApprovals.id, call.id));
    await (await res).text();
    await idle(threadId);
    const calls = await childCalls(call.run_id);
    expect(calls[0]?.result_preview).toBe("denied by the user: no decision within 86400 s (tools.approval_timeout_seconds)");
    expect((await decide(threadId, call.id, { decision: "approve" })).status).toBe(409);
  });
});
