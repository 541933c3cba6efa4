import { APICallError, type LanguageModelV3, type LanguageModelV3Prompt } from "@ai-sdk/provider";
import { beforeAll, describe, expect, it } from "vitest";
import { materializedHistory } from "@/server/agent/swarm/resume";
import { runSwarm } from "@/server/agent/swarm/run";
import { createSimulatorModel } from "@/server/models/simulator";
import type { ResolvedModel } from "@/server/models/types";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { childRuns, harness, SIMULATED, seedUserThread } from "./support";

/**
 * Retries keep what the agent did: a swarm child rate-limited after a tool call is retried from
 * its materialized history (prompt, tool call, tool result) and sends no second prompt; a resume
 * replays tool calls the same way.
 */

let t: TestDatabase;
let who: { userId: string; threadId: string };

beforeAll(async () => {
  t = await createTestDatabase();
  who = await seedUserThread(t.db);
});

/**
 * The simulator, except that the first call made after a tool result for a prompt containing
 * "limit-after-tool" answers like a provider 429 (a provider limiting mid-run). Every prompt it
 * receives is kept.
 */
function limitedAfterTool(): ResolvedModel & { prompts: LanguageModelV3Prompt[] } {
  const inner = createSimulatorModel({ latencyMs: 0 });
  const prompts: LanguageModelV3Prompt[] = [];
  let limited = false;
  const gate = (prompt: LanguageModelV3Prompt) => {
    prompts.push(prompt);
    const text = JSON.stringify(prompt);
    if (!limited && text.includes("limit-after-tool") && prompt.at(-1)?.role === "tool") {
      limited = true;
      throw new APICallError({
        message: "Rate limit exceeded",
        url: "test://limited",
        requestBodyValues: {},
        statusCode: 429,
        responseHeaders: { "retry-after": "0" },
        isRetryable: false,
      });
    }
  };
  const model: LanguageModelV3 = {
    ...inner,
    doGenerate: async (o) => {
      gate(o.prompt);
      return inner.doGenerate(o);
    },
    doStream: async (o) => {
      gate(o.prompt);
      return inner.doStream(o);
    },
  };
  return { ...SIMULATED, model, prompts };
}

const userMessages = (p: LanguageModelV3Prompt) => p.filter((m) => m.role === "user").length;

describe("swarm retry after a rate limit", () => {
  it("replays the child's tool call and result and sends no second prompt", async () => {
    const model = limitedAfterTool();
    const h = await harness(t.db, who, { model, timings: { retryBaseDelayMs: 50 } });
    const task = 'limit-after-tool: count [[tool:count_text {"text":"one two three"}]]';
    const result = await runSwarm(h.ctx, {
      items: [
        { item_id: "limited", profile: "general", task },
        { item_id: "steady", profile: "general", task: "steady [[sleep:1500]]" },
      ],
    });
    const limited = result.items.find((i) => i.item_id === "limited")!;
    expect(limited).toMatchObject({ status: "completed", attempts: 2 });
    expect(limited.summary).toMatch(/count_text:\n\{.*"characters":13/);

    const runs = (await childRuns(t.db, h.ctx.leadRunId)).filter((r) => r.prompt === task);
    expect(runs).toHaveLength(2);
    const [first, retry] = runs;
    expect(first).toMatchObject({ status: "failed", toolCallCount: 1 });
    expect(first.toolCalls?.[0]).toMatchObject({ name: "count_text", status: "ok" });
    // The retry ran no tool again: the result came from the replayed history.
    expect(retry).toMatchObject({ status: "completed", retryOfRunId: first.id, toolCallCount: 0 });

    const limitedPrompts = model.prompts.filter((p) => JSON.stringify(p).includes("limit-after-tool"));
    // 1: the prompt; 2: after the tool result (429); 3: the retry, continuing from that same point.
    expect(limitedPrompts).toHaveLength(3);
    expect(limitedPrompts.map((p) => p.map((m) => m.role).join(","))).toEqual([
      "system,user",
      "system,user,assistant,tool",
      "system,user,assistant,tool",
    ]);
    expect(limitedPrompts.every((p) => userMessages(p) === 1)).toBe(true);
    // Deep equality: the stored (jsonb) copy keeps every value, though not the key order.
    expect(limitedPrompts[2]).toEqual(limitedPrompts[1]);
    // The retry's transcript is the first attempt's history, continued.
    expect((retry.transcript as unknown[]).slice(0, 3)).toEqual((first.transcript as unknown[]).slice(0, 3));
  });

  it("resume_run_ids replays the source's tool calls without running them again", async () => {
    const first = await harness(t.db, who);
    const done = await runSwarm(first.ctx, {
      items: [{ item_id: "origin", profile: "general", task: 'Count [[tool:count_text {"text":"ab cd"}]]' }],
    });
    expect(done.items[0].status).toBe("completed");
    const [source] = await childRuns(t.db, first.ctx.leadRunId);
    expect(source.toolCallCount).toBe(1);

    const again = await harness(t.db, who);
    const resumed = await runSwarm(again.ctx, { resume_run_ids: { [source.id]: "[[echo]]What did the count say?" } });
    expect(resumed.items[0].status).toBe("completed");
    const [run] = await childRuns(t.db, again.ctx.leadRunId);
    expect(run).toMatchObject({ resumedFromRunId: source.id, toolCallCount: 0 });
    const transcript = run.transcript as Array<{ role: string; content: unknown }>;
    expect(transcript.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant", "user", "assistant"]);
    expect(JSON.stringify(transcript[2])).toContain('"characters":5');
  });
});

describe("materializedHistory", () => {
  it("drops a trailing tool call that never got its result", () => {
    const user = { role: "user", content: "q" };
    const call = {
      role: "assistant",
      content: [{ type: "tool-call", toolCallId: "c1", toolName: "count_text", input: {} }],
    };
    const result = {
      role: "tool",
      content: [{ type: "tool-result", toolCallId: "c1", toolName: "count_text", output: { type: "text", value: "1" } }],
    };
    const open = { role: "assistant", content: [{ type: "tool-call", toolCallId: "c2", toolName: "x", input: {} }] };
    expect(materializedHistory([user, call, result, open])).toEqual([user, call, result]);
    expect(materializedHistory([user, call])).toEqual([user]);
    expect(materializedHistory([])).toBeUndefined();
    expect(materializedHistory(null)).toBeUndefined();
  });
});
