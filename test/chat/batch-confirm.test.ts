import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { subagentBatches } from "@/server/db/schema";
import { makeThread, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { type LeadChat, startLeadChat, type ToolPart } from "../helpers/lead-chat";
import type { WebServer } from "../helpers/web-server";
import { waitUntil } from "../loop/support";

/**
 * No surprise bills from the chat, over a real socket with the simulator: a lead's batch_task
 * whose estimate is over subagent_batches.confirm_over_usd (0 here: the simulator is free, and
 * 0 asks always) creates nothing and waits on an approval card carrying the estimate; Run,
 * "Run a pilot of 10" (decision approve, option pilot) and Cancel (deny) each reach the lead in
 * the tool result; an option on a card that does not offer it, an option with deny, and another
 * user's decision are refused and decide nothing.
 */

process.env.FLOTILLA__SIMULATOR__LATENCY_MS = "20";
process.env.FLOTILLA__SUBAGENT_BATCHES__CONFIRM_OVER_USD = "0";
process.env.FLOTILLA__TOOLS__REQUIRE_APPROVAL = JSON.stringify(["workspace/write_file"]);
process.env.FLOTILLA__LEAD__TOOL_GROUPS = JSON.stringify(["workspace"]);
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
const t = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let bob: TestUser;
let chat: LeadChat;

beforeAll(async () => {
  ({ server, alice, bob, chat } = await startLeadChat(t));
  await workerAlive(t);
});
afterAll(async () => {
  await server?.close();
});

const say = (threadId: string, text: string) => chat.say(threadId, text);
const idle = (threadId: string) => chat.idle(threadId);
const waiting = (threadId: string) => chat.waiting(threadId);
const decide = (threadId: string, approvalId: string, body: unknown, user = alice) => chat.decide(threadId, approvalId, body, user);

const batchesOf = (threadId: string) => t.db.select().from(subagentBatches).where(eq(subagentBatches.threadId, threadId));

async function batchTaskPart(threadId: string): Promise<ToolPart> {
  return (await chat.toolParts(threadId, "batch_task"))[0]!;
}

/** "batch x30" in the chat, as a new user would type it: the card waits with the estimate, nothing created. */
async function askedCard(threadId: string) {
  await say(threadId, "batch x30: review ticket {{item}}");
  const [card, ...rest] = await waiting(threadId);
  expect(rest).toEqual([]);
  expect(card).toMatchObject({ kind: "lead", tool: "batch_task" });
  expect(card!.estimate).toMatchObject({ items: 30, output_tokens: 15_000, tokens_method: "approx", cost_usd: { live: 0 } });
  expect(card!.estimate!.input_tokens).toBeGreaterThan(30);
  expect(await batchesOf(threadId)).toEqual([]);
  expect((await batchTaskPart(threadId)).state).toBe("approval-requested");
  return card!;
}

describe("batch_task over subagent_batches.confirm_over_usd", () => {
  it('"Run a pilot of 10" submits the batch with pilot 10, and the tool result says what the person chose', async () => {
    const threadId = await makeThread(t, alice);
    const card = await askedCard(threadId);
    // Refused without deciding: an option with deny, another user's decision.
    const withDeny = await decide(threadId, card.id, { decision: "deny", option: "pilot" });
    expect(withDeny.status).toBe(400);
    expect(((await withDeny.json()) as { error: { message: string } }).error.message).toMatch(/^option: /);
    expect((await decide(threadId, card.id, { decision: "approve", option: "pilot" }, bob)).status).toBe(404);
    expect(await waiting(threadId)).toHaveLength(1);

    const res = await decide(threadId, card.id, { decision: "approve", option: "pilot" });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { approval: unknown }).approval).toMatchObject({ status: "approved", option: "pilot" });
    const output = await waitUntil("the tool result", async () => (await batchTaskPart(threadId)).output, 60_000, 100);
    await idle(threadId);
    const [batch, ...others] = await batchesOf(threadId);
    expect(others).toEqual([]);
    expect(batch).toMatchObject({ total: 30, pilot: 10 });
    expect(output).toMatchObject({ batch_id: batch!.id, pilot: 10, estimate: { items: 30 } });
    expect(String(output.person_chose)).toMatch(/Run a pilot of 10/);
    // A second decision is 409.
    expect((await decide(threadId, card.id, { decision: "approve" })).status).toBe(409);
  });

  it("Run submits every item; Cancel submits nothing and the lead reads why", async () => {
    const runThread = await makeThread(t, alice);
    const run = await askedCard(runThread);
    expect((await decide(runThread, run.id, { decision: "approve" })).status).toBe(200);
    const output = await waitUntil("the tool result", async () => (await batchTaskPart(runThread)).output, 60_000, 100);
    await idle(runThread);
    const [batch] = await batchesOf(runThread);
    expect(batch).toMatchObject({ total: 30, pilot: null });
    expect(String(output.person_chose)).toMatch(/chose Run/);

    const cancelThread = await makeThread(t, alice);
    const cancel = await askedCard(cancelThread);
    const reason = "cancelled after seeing the estimate; nothing was submitted";
    expect((await decide(cancelThread, cancel.id, { decision: "deny", reason })).status).toBe(200);
    await waitUntil("the denial reached the reply", async () => ((await batchTaskPart(cancelThread)).state === "output-denied" ? true : undefined), 60_000, 100);
    await idle(cancelThread);
    expect((await batchTaskPart(cancelThread)).approval?.reason).toContain(reason);
    expect(await batchesOf(cancelThread)).toEqual([]);
  });

  it("an option on a card that does not offer it is a 400 and decides nothing", async () => {
    const threadId = await makeThread(t, alice);
    await say(threadId, 'Save it [[tool:write_file {"path":"a.md","content":"x"}]]');
    const [card] = await waiting(threadId);
    expect(card).toMatchObject({ tool: "write_file" });
    expect(card!.estimate).toBeUndefined();
    const res = await decide(threadId, card!.id, { decision: "approve", option: "pilot" });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/^option: /);
    expect(await waiting(threadId)).toHaveLength(1);
    expect((await decide(threadId, card!.id, { decision: "deny" })).status).toBe(200);
    await idle(threadId);
  });
});
