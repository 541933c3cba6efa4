import { randomUUID } from "node:crypto";
import { and, eq } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { replayProblem } from "@/server/agent/swarm/resume";
import { runSwarm } from "@/server/agent/swarm/run";
import { agentRuns } from "@/server/db/schema";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { childRuns, eventsOf, harness, seedUserThread, simulator } from "./support";

let t: TestDatabase;
let who: { userId: string; threadId: string };
let other: { userId: string; threadId: string };

beforeAll(async () => {
  t = await createTestDatabase();
  who = await seedUserThread(t.db);
  other = await seedUserThread(t.db);
});

/** Runs a one-item swarm and returns its child run row. */
async function firstChild(task: string, profile = "general") {
  const h = await harness(t.db, who);
  const result = await runSwarm(h.ctx, { items: [{ item_id: "origin", profile, task }] });
  expect(result.items[0].status).toBe("completed");
  const [run] = await childRuns(t.db, h.ctx.leadRunId);
  return run;
}

const goodTranscript = [
  { role: "user", content: "earlier question" },
  { role: "assistant", content: [{ type: "text", text: "earlier answer" }] },
];

/** A child run row written directly (states a real run could be left in). */
async function insertChild(fields: Partial<typeof agentRuns.$inferInsert> & { parentRunId: string }) {
  const [row] = await t.db
    .insert(agentRuns)
    .values({
      userId: who.userId,
      threadId: who.threadId,
      kind: "swarm_child",
      definition: "general",
      model: "simulator",
      status: "completed",
      transcript: goodTranscript,
      depth: 1,
      finishedAt: new Date(),
      ...fields,
    })
    .returning();
  return row;
}

async function successors(sourceId: string) {
  return t.db.select().from(agentRuns).where(eq(agentRuns.resumedFromRunId, sourceId));
}

describe("agent_swarm resume: success", () => {
  it("continues a child in a fresh linked run that replays the source's history, resumes first, then chains", async () => {
    const source = await firstChild("Remember the code word PLUM.", "researcher");
    const h = await harness(t.db, who);
    const result = await runSwarm(h.ctx, {
      items: [{ item_id: "fresh", profile: "general", task: "An unrelated new item." }],
      resume_run_ids: { [source.id]: "What was the code word?" },
    });
    expect(result.aggregate.status).toBe("completed");
    expect(result.items.map((r) => r.item_id)).toEqual(["resume-1", "fresh"]);
    const resumed = result.items[0];
    expect(resumed).toMatchObject({ status: "completed", profile: "researcher", resumed_from_run_id: source.id });

    const [run] = await t.db.select().from(agentRuns).where(eq(agentRuns.id, resumed.child_run_id!));
    expect(run).toMatchObject({
      kind: "swarm_child",
      resumedFromRunId: source.id,
      parentRunId: h.ctx.leadRunId,
      definition: "researcher",
      prompt: "What was the code word?",
      status: "completed",
    });
    // The transcript is the source's complete history, then the new prompt, then the answer.
    const sourceTranscript = source.transcript as unknown[];
    const transcript = run.transcript as Array<{ role: string; content: unknown }>;
    expect(transcript.slice(0, sourceTranscript.length)).toEqual(sourceTranscript);
    expect(transcript[sourceTranscript.length]).toEqual({ role: "user", content: "What was the code word?" });
    expect(transcript.at(-1)?.role).toBe("assistant");
    // The model really received that history: a cold run of the same prompt reads far fewer tokens.
    const cold = await harness(t.db, who);
    const coldResult = await runSwarm(cold.ctx, { items: [{ item_id: "cold", profile: "researcher", task: "What was the code word?" }] });
    const [coldRun] = await t.db.select().from(agentRuns).where(eq(agentRuns.id, coldResult.items[0].child_run_id!));
    expect(run.inputTokens).toBeGreaterThan(coldRun.inputTokens);
    expect(run.result).not.toBe(coldRun.result);

    // The source has its one successor now; resuming that successor forms a chain.
    const again = await harness(t.db, who);
    const chained = await runSwarm(again.ctx, { resume_run_ids: { [run.id]: "And spell it backwards." } });
    expect(chained.items).toHaveLength(1);
    expect(chained.items[0]).toMatchObject({ status: "completed", resumed_from_run_id: run.id });
    const [second] = await t.db.select().from(agentRuns).where(eq(agentRuns.id, chained.items[0].child_run_id!));
    expect((second.transcript as unknown[]).slice(0, transcript.length)).toEqual(transcript);

    // ...but the original source cannot get a second successor.
    const dup = await harness(t.db, who);
    const refused = await runSwarm(dup.ctx, { resume_run_ids: { [source.id]: "once more" } });
    expect(refused.rejection?.message).toContain(`was already resumed by run ${run.id}`);
    expect(await childRuns(t.db, dup.ctx.leadRunId)).toHaveLength(0);
  });

  it("failed and cancelled children may be continued", async () => {
    const h = await harness(t.db, who);
    const failedSource = await insertChild({ parentRunId: h.ctx.leadRunId, status: "failed", error: "boom" });
    const cancelledSource = await insertChild({ parentRunId: h.ctx.leadRunId, status: "cancelled" });
    const next = await harness(t.db, who);
    const result = await runSwarm(next.ctx, {
      resume_run_ids: { [failedSource.id]: "try again", [cancelledSource.id]: "finish it" },
    });
    expect(result.items.map((r) => `${r.item_id}:${r.status}:${r.resumed_from_run_id}`)).toEqual([
      `resume-1:completed:${failedSource.id}`,
      `resume-2:completed:${cancelledSource.id}`,
    ]);
  });

  it("two concurrent swarms cannot both resume the same source", async () => {
    const h = await harness(t.db, who);
    const source = await insertChild({ parentRunId: h.ctx.leadRunId });
    const a = await harness(t.db, who);
    const b = await harness(t.db, who);
    const [ra, rb] = await Promise.all([
      runSwarm(a.ctx, { resume_run_ids: { [source.id]: "continue A [[sleep:200]]" } }),
      runSwarm(b.ctx, { resume_run_ids: { [source.id]: "continue B [[sleep:200]]" } }),
    ]);
    const outcomes = [ra, rb].map((r) => (r.rejection ? "rejected" : r.items[0].status)).sort();
    expect(outcomes).toEqual(["completed", "rejected"]);
    expect(await successors(source.id)).toHaveLength(1);
  });
});

describe("agent_swarm resume: preflight refusals start nothing", () => {
  type Case = { name: string; build: () => Promise<{ id: string; model?: string }>; message: (id: string) => string };
  const cases: Case[] = [
    {
      name: "an unknown run id",
      build: async () => ({ id: randomUUID() }),
      message: () => "is not a child run of this thread",
    },
    {
      name: "another user's child run",
      build: async () => {
        const h = await harness(t.db, other);
        const [row] = await t.db
          .insert(agentRuns)
          .values({ userId: other.userId, threadId: other.threadId, parentRunId: h.ctx.leadRunId, kind: "swarm_child", definition: "general", model: "simulator", status: "completed", transcript: goodTranscript })
          .returning();
        return { id: row.id };
      },
      message: () => "is not a child run of this thread",
    },
    {
      name: "a lead run",
      build: async () => ({ id: (await harness(t.db, who)).ctx.leadRunId }),
      message: () => "is not a child run of this thread",
    },
    {
      name: "a running child",
      build: async () => ({ id: (await insertChild({ parentRunId: (await harness(t.db, who)).ctx.leadRunId, status: "running", finishedAt: null })).id }),
      message: () => "is still running; only finished runs can be resumed",
    },
    {
      name: "a child of another model",
      build: async () => ({ id: (await insertChild({ parentRunId: (await harness(t.db, who)).ctx.leadRunId })).id, model: "other-model" }),
      message: () => 'ran on model "simulator", but this thread now uses "other-model"',
    },
    {
      name: "a child without stored history",
      build: async () => ({ id: (await insertChild({ parentRunId: (await harness(t.db, who)).ctx.leadRunId, transcript: null })).id }),
      message: () => "has no stored history",
    },
    {
      name: "a child whose history ends inside a tool call",
      build: async () => ({
        id: (
          await insertChild({
            parentRunId: (await harness(t.db, who)).ctx.leadRunId,
            transcript: [
              { role: "user", content: "q" },
              { role: "assistant", content: [{ type: "tool-call", toolCallId: "c1", toolName: "count_text", input: {} }] },
            ],
          })
        ).id,
      }),
      message: () => "history ends inside a tool call without its result",
    },
    {
      name: "a child whose ancestor used another profile",
      build: async () => {
        const lead = (await harness(t.db, who)).ctx.leadRunId;
        const ancestor = await insertChild({ parentRunId: lead, definition: "researcher" });
        return { id: (await insertChild({ parentRunId: lead, resumedFromRunId: ancestor.id })).id };
      },
      message: () => 'used profile "researcher", not "general"',
    },
    {
      name: "a child whose ancestor is not finished",
      build: async () => {
        const lead = (await harness(t.db, who)).ctx.leadRunId;
        const ancestor = await insertChild({ parentRunId: lead, status: "pending", finishedAt: null });
        return { id: (await insertChild({ parentRunId: lead, retryOfRunId: ancestor.id })).id };
      },
      message: () => "is still pending",
    },
  ];

  for (const c of cases)
    it(`refuses ${c.name}, and the new items of the same call do not start`, async () => {
      const { id, model } = await c.build();
      const h = await harness(t.db, who, { model: model ? { ...simulator, name: model, catalogName: model } : simulator });
      const result = await runSwarm(h.ctx, {
        prompt_template: "fresh {{item}}",
        items: ["a", "b"],
        resume_run_ids: { [id]: "continue" },
      });
      expect(result.aggregate.status).toBe("rejected");
      expect(result.rejection?.message).toContain(`resume_run_ids["${id}"]`);
      expect(result.rejection?.message).toContain(c.message(id));
      expect(await childRuns(t.db, h.ctx.leadRunId)).toHaveLength(0);
      expect(await successors(id)).toHaveLength(0);
      expect((await eventsOf(t.db, h.ctx.leadRunId)).map((e) => e.type)).toEqual(["swarm.tool_admission_rejected"]);
    });

  it("does not reach into another thread of the same user", async () => {
    const sibling = await t.db.insert((await import("@/server/db/schema")).threads).values({ userId: who.userId }).returning();
    const there = await harness(t.db, { userId: who.userId, threadId: sibling[0].id });
    const source = await insertChild({ parentRunId: there.ctx.leadRunId, threadId: sibling[0].id });
    const here = await harness(t.db, who);
    const result = await runSwarm(here.ctx, { resume_run_ids: { [source.id]: "continue" } });
    expect(result.rejection?.message).toContain("is not a child run of this thread");
    const rows = await t.db.select().from(agentRuns).where(and(eq(agentRuns.resumedFromRunId, source.id)));
    expect(rows).toHaveLength(0);
  });
});

describe("replayable history", () => {
  it("accepts user-anchored histories whose tool calls all have results", () => {
    expect(replayProblem(goodTranscript)).toBeNull();
    expect(
      replayProblem([
        { role: "user", content: "q" },
        { role: "assistant", content: [{ type: "tool-call", toolCallId: "c1", toolName: "t", input: {} }] },
        { role: "tool", content: [{ type: "tool-result", toolCallId: "c1", toolName: "t", output: { type: "text", value: "x" } }] },
        { role: "assistant", content: [{ type: "text", text: "done" }] },
      ]),
    ).toBeNull();
  });
  it("rejects empty, assistant-first and malformed histories", () => {
    expect(replayProblem([])).toBe("has no stored history");
    expect(replayProblem(null)).toBe("has no stored history");
    expect(replayProblem([{ role: "assistant", content: "hi" }])).toBe("history does not start with a user message");
    expect(replayProblem([{ role: "user", content: "q" }, { role: "wizard", content: "x" }])).toBe("history holds a message of unknown role");
    expect(replayProblem([{ role: "user", content: 5 }])).toBe("history holds a malformed message");
  });
});
