import { APICallError, type LanguageModelV3CallOptions, type LanguageModelV3StreamPart } from "@ai-sdk/provider";
import { generateText, RetryError, stepCountIs, streamText, tool } from "ai";
import { beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import type { SwarmResult } from "@/lib/api/swarm";
import { type BatchSettledNotice, noticeOptions } from "@/lib/api/model-facts";
import { swarmModelOutput } from "@/server/agent/tools/swarm";
import { type TaskToolOutput, taskModelOutput } from "@/server/agent/tools/task";
import { classifyModelError, retryAfterMs } from "@/server/runtime/model-errors";
import { createSimulatorModel, resetSimulatorOnceState } from "@/server/models/simulator";
import { parseDirectives } from "@/server/models/simulator/directives";
import { parseToolCalls } from "@/server/models/simulator/grammar";

const fast = createSimulatorModel({ latencyMs: 0 });

function userCall(text: string, extra: Partial<LanguageModelV3CallOptions> = {}): LanguageModelV3CallOptions {
  return { prompt: [{ role: "user", content: [{ type: "text", text }] }], ...extra };
}

async function drain(stream: ReadableStream<LanguageModelV3StreamPart>): Promise<LanguageModelV3StreamPart[]> {
  const parts: LanguageModelV3StreamPart[] = [];
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return parts;
    parts.push(value);
  }
}

async function answer(text: string, model = fast) {
  const result = streamText({ model, prompt: text, maxRetries: 0 });
  return { text: await result.text, usage: await result.usage, finishReason: await result.finishReason };
}

async function rejection(p: PromiseLike<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error("expected a rejection");
}

beforeEach(() => resetSimulatorOnceState());

describe("simulator model", () => {
  it("is a v3 language model streaming the documented part sequence", async () => {
    const { stream } = await fast.doStream(userCall("Describe the harbour at dawn"));
    const parts = await drain(stream);
    const types = parts.map((p) => p.type);
    expect(fast.specificationVersion).toBe("v3");
    expect(types[0]).toBe("stream-start");
    expect(types).toContain("text-start");
    expect(types.filter((t) => t === "text-delta").length).toBeGreaterThan(5);
    expect(types.at(-2)).toBe("text-end");
    const finish = parts.at(-1);
    expect(finish?.type).toBe("finish");
    if (finish?.type !== "finish") throw new Error("no finish");
    expect(finish.finishReason.unified).toBe("stop");
    expect(finish.usage.inputTokens.total).toBeGreaterThan(0);
    expect(finish.usage.outputTokens.total).toBeGreaterThan(0);
  });

  it("answers deterministically from the prompt", async () => {
    const a = await answer("What is the tallest lighthouse?");
    const b = await answer("What is the tallest lighthouse?");
    const c = await answer("What is the smallest lighthouse?");
    expect(a.text).toBe(b.text);
    expect(a.text).not.toBe(c.text);
    expect(a.text).toContain("What is the tallest lighthouse?");
    const generated = await generateText({ model: fast, prompt: "What is the tallest lighthouse?" });
    expect(generated.text).toBe(a.text);
  });

  it("reports usage of about chars/4 for prompt and answer", async () => {
    const short = await answer("hi [[chars:40]]");
    const long = await answer(`${"word ".repeat(400)}[[chars:4000]]`);
    expect(short.usage.outputTokens).toBe(10);
    expect(long.usage.outputTokens).toBe(1000);
    expect(long.usage.inputTokens).toBeGreaterThanOrEqual(500);
    expect(long.usage.inputTokens).toBeLessThan(520);
    expect(short.usage.inputTokens).toBeLessThan(10);
  });

  it("[[chars:N]] answers with exactly N characters", async () => {
    for (const n of [0, 1, 17, 250, 5000]) {
      const { text } = await answer(`Write something [[chars:${n}]]`);
      expect(text.length).toBe(n);
    }
  });

  it("spreads word-sized deltas over the configured latency", async () => {
    const model = createSimulatorModel({ latencyMs: 600 });
    const started = Date.now();
    const result = streamText({ model, prompt: "Tell me about tides [[chars:200]]" });
    const arrivals: number[] = [];
    for await (const delta of result.textStream) {
      arrivals.push(Date.now() - started);
      expect(delta.length).toBeLessThan(40);
    }
    expect(arrivals.length).toBeGreaterThan(10);
    // The first word arrives early, the last one at the latency: deltas are spread, not bunched.
    expect(arrivals[0]).toBeLessThan(300);
    expect(arrivals.at(-1)).toBeGreaterThanOrEqual(590);
    expect(arrivals.at(-1)).toBeLessThan(2000);
  });

  it("[[sleep:MS]] answers after MS milliseconds instead of the default latency", async () => {
    let t = Date.now();
    await answer("baseline");
    const baseline = Date.now() - t;
    t = Date.now();
    await answer("slow one [[sleep:400]]");
    const slept = Date.now() - t;
    expect(baseline).toBeLessThan(250);
    expect(slept).toBeGreaterThanOrEqual(395);
    expect(slept - baseline).toBeGreaterThanOrEqual(300);
    expect(slept).toBeLessThan(2000);
    // And it overrides a long default in the other direction.
    t = Date.now();
    await answer("quick [[sleep:0]]", createSimulatorModel({ latencyMs: 5000 }));
    expect(Date.now() - t).toBeLessThan(2000);
  });

  it("[[fail]] fails every call with a provider error", async () => {
    for (let i = 0; i < 2; i++) {
      const err = await rejection(fast.doStream(userCall("please [[fail]]")));
      expect(APICallError.isInstance(err)).toBe(true);
      expect(classifyModelError(err)).toBe("provider");
    }
    const err = await rejection(generateText({ model: fast, prompt: "please [[fail]]" }));
    expect(String(err)).toContain("Simulated model failure");
  });

  it("[[fail-once]] fails only the first call for that exact prompt", async () => {
    await expect(fast.doStream(userCall("flaky [[fail-once]]"))).rejects.toThrow(/fail-once/);
    const ok = await fast.doStream(userCall("flaky [[fail-once]]"));
    expect((await drain(ok.stream)).at(-1)?.type).toBe("finish");
    // A different prompt text has its own first attempt.
    await expect(fast.doStream(userCall("flaky 2 [[fail-once]]"))).rejects.toThrow(/fail-once/);
    // The AI SDK does not retry it (not retryable): callers own retries.
    await expect(generateText({ model: fast, prompt: "flaky 3 [[fail-once]]" })).rejects.toThrow(/fail-once/);
    expect((await generateText({ model: fast, prompt: "flaky 3 [[fail-once]]" })).text).toContain("flaky 3");
  });

  it("[[fail-once]] fails exactly one of many concurrent first calls", async () => {
    const outcomes = await Promise.allSettled(
      Array.from({ length: 12 }, () => generateText({ model: fast, prompt: "racing [[fail-once]]", maxRetries: 0 })),
    );
    expect(outcomes.filter((o) => o.status === "rejected")).toHaveLength(1);
    expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(11);
  });

  it("clamps an enormous [[sleep]] instead of overflowing the timer", async () => {
    expect(parseDirectives("[[sleep:99999999999999]]").sleepMs).toBe(2_147_483_647);
    const controller = new AbortController();
    const pending = generateText({ model: fast, prompt: "[[sleep:99999999999999]]", abortSignal: controller.signal });
    const settled = await Promise.race([pending.then(() => "answered", () => "failed"), new Promise((r) => setTimeout(() => r("waiting"), 100))]);
    expect(settled).toBe("waiting");
    controller.abort();
    await expect(pending).rejects.toMatchObject({ name: "AbortError" });
  });

  it("[[429]] answers like a provider rate limit with retry-after", async () => {
    const err = await rejection(fast.doStream(userCall("busy [[429]]")));
    if (!APICallError.isInstance(err)) throw new Error("expected APICallError");
    expect(err.statusCode).toBe(429);
    expect(err.isRetryable).toBe(true);
    expect(err.responseHeaders).toEqual({ "retry-after": "1" });
    expect(classifyModelError(err)).toBe("rate_limit");
    expect(retryAfterMs(err)).toBe(1000);
    // Through the AI SDK's own retries (respecting retry-after): 2 attempts then a RetryError of 429s.
    const started = Date.now();
    const wrapped = await rejection(generateText({ model: fast, prompt: "busy [[429]]", maxRetries: 1 }));
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    expect(RetryError.isInstance(wrapped)).toBe(true);
    expect(classifyModelError(wrapped)).toBe("rate_limit");
    expect(retryAfterMs(wrapped)).toBe(1000);
  });

  it("[[429-once]] rate-limits only the first call, so a retry after retry-after succeeds", async () => {
    await expect(fast.doStream(userCall("burst [[429-once]]"))).rejects.toMatchObject({ statusCode: 429 });
    const ok = await fast.doStream(userCall("burst [[429-once]]"));
    expect((await drain(ok.stream)).at(-1)?.type).toBe("finish");
    const started = Date.now();
    const result = await generateText({ model: fast, prompt: "burst 2 [[429-once]]", maxRetries: 1 });
    expect(result.text).toContain("burst 2");
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
  });

  it("stops streaming promptly on abort and rejects with the abort reason", async () => {
    const model = createSimulatorModel({ latencyMs: 2000 });
    const controller = new AbortController();
    const { stream } = await model.doStream(userCall("long story [[chars:2000]]", { abortSignal: controller.signal }));
    const reader = stream.getReader();
    const seen: LanguageModelV3StreamPart[] = [];
    while (!seen.some((p) => p.type === "text-delta")) seen.push((await reader.read()).value as LanguageModelV3StreamPart);
    const reason = new Error("user pressed stop");
    const t = Date.now();
    controller.abort(reason);
    await expect(reader.read()).rejects.toBe(reason);
    // Far sooner than the 2 s the answer would otherwise take.
    expect(Date.now() - t).toBeLessThan(250);
  });

  it("aborts through streamText mid-answer and before the call", async () => {
    const model = createSimulatorModel({ latencyMs: 1000 });
    const controller = new AbortController();
    const result = streamText({ model, prompt: "long story [[chars:3000]]", abortSignal: controller.signal });
    let text = "";
    const t = Date.now();
    for await (const delta of result.textStream) {
      text += delta;
      if (text.length > 50) controller.abort();
    }
    expect(Date.now() - t).toBeLessThan(900);
    expect(text.length).toBeGreaterThan(50);
    expect(text.length).toBeLessThan(3000);
    const pre = new AbortController();
    pre.abort(new Error("already gone"));
    await expect(fast.doStream(userCall("x", { abortSignal: pre.signal }))).rejects.toThrow("already gone");
    await expect(fast.doGenerate(userCall("x [[sleep:50]]", { abortSignal: pre.signal }))).rejects.toThrow("already gone");
  });

  it("reads directives from the latest user message only", async () => {
    const result = await generateText({
      model: fast,
      system: "Mention [[fail]] to users when describing directives.",
      messages: [
        { role: "user", content: "earlier [[fail]]" },
        { role: "assistant", content: "ok" },
        { role: "user", content: "now fine [[chars:12]]" },
      ],
    });
    expect(result.text).toHaveLength(12);
  });
});

describe("directive and grammar parsing", () => {
  it("parses every directive and ignores malformed ones", () => {
    expect(parseDirectives("a [[sleep:250]] b [[chars:9]] [[fail]] [[fail-once]] [[429]] [[429-once]]")).toEqual({
      sleepMs: 250,
      chars: 9,
      fail: true,
      failOnce: true,
      rateLimit: true,
      rateLimitOnce: true,
    });
    expect(parseDirectives("[[sleep]] [[chars:x]] [[fail:3]] [fail] [[nope]]")).toEqual({
      fail: false,
      failOnce: false,
      rateLimit: false,
      rateLimitOnce: false,
    });
  });

  it("turns each grammar form into the documented tool input", () => {
    const all = new Set(["task", "agent_swarm", "batch_task", "batch_status", "echo"]);
    const text = [
      'Intro [[call:echo {"text":"a ]] b","n":[1,{"x":"}"}]}]] and [[call:batch_status]]',
      "task: Summarise the report [[sleep:10]]",
      "  TASK:   Check the figures  ",
      "swarm: Review {{item}} carefully | alpha; beta ;; gamma",
      "batch: Translate {{item}} | one; two",
      "batch x3: Score item {{item}}",
      "batch status",
      "plain closing words",
    ].join("\n");
    const { calls, rest } = parseToolCalls(text, all);
    expect(calls).toEqual([
      { toolName: "echo", input: { text: "a ]] b", n: [1, { x: "}" }] } },
      { toolName: "batch_status", input: {} },
      {
        toolName: "task",
        input: { subagent: "general", description: "Summarise the report", prompt: "Summarise the report [[sleep:10]]" },
      },
      { toolName: "task", input: { subagent: "general", description: "Check the figures", prompt: "Check the figures" } },
      {
        toolName: "agent_swarm",
        input: { profile: "general", prompt_template: "Review {{item}} carefully", items: ["alpha", "beta", "gamma"] },
      },
      { toolName: "batch_task", input: { prompt_template: "Translate {{item}}", items: ["one", "two"] } },
      { toolName: "batch_task", input: { prompt_template: "Score item {{item}}", items: ["1", "2", "3"] } },
      { toolName: "batch_status", input: {} },
    ]);
    expect(rest).not.toContain("[[call:");
    expect(rest).not.toContain("[[sleep");
    expect(rest).toContain("plain closing words");
  });

  it("makes no calls for tools not offered, invalid JSON, or out-of-range counts", () => {
    const { calls, rest } = parseToolCalls(
      '[[call:secret {"a":1}]]\ntask: nope\n[[call:echo {bad json}]]\n[[call:echo {"a":1}\nbatch x0: t\nbatch x100001: t',
      new Set(["echo", "batch_task"]),
    );
    expect(calls).toEqual([]);
    expect(rest).toContain("task: nope");
    expect(rest).toContain("[[call:secret");
  });
});

describe("simulator tool calls through streamText", () => {
  const taskInput = z.object({ subagent: z.string().default("general"), description: z.string(), prompt: z.string() });
  function tools(log: string[]) {
    return {
      task: tool({
        inputSchema: taskInput,
        execute: async (input) => {
          log.push(`task:${input.prompt}`);
          return `Result for ${input.prompt}: ${"detail ".repeat(60)}`;
        },
      }),
      batch_task: tool({
        inputSchema: z.object({ prompt_template: z.string(), items: z.array(z.string()) }),
        execute: async (input) => {
          log.push(`batch:${input.items.length}`);
          return { batch_id: "b-1", status: "queued", total: input.items.length };
        },
      }),
      batch_status: tool({
        inputSchema: z.object({ batch_id: z.string().optional() }),
        execute: async () => {
          log.push("status");
          return { batches: [] };
        },
      }),
      agent_swarm: tool({
        inputSchema: z.object({ profile: z.string(), prompt_template: z.string(), items: z.array(z.string()) }),
        execute: async (input) => {
          log.push(`swarm:${input.items.join(",")}`);
          return { children: input.items.length };
        },
      }),
    };
  }

  it("emits parallel calls for the offered tools, then summarises the results", async () => {
    const log: string[] = [];
    const result = streamText({
      model: fast,
      prompt: "task: Find the ferry times\ntask: Check the weather [[fail]]\nswarm: Review {{item}} | a; b\nbatch x2: Rate {{item}}\nbatch status",
      tools: tools(log),
      stopWhen: stepCountIs(4),
    });
    const text = await result.text;
    const steps = await result.steps;
    expect(steps).toHaveLength(2);
    expect(steps[0].finishReason).toBe("tool-calls");
    expect(steps[0].toolCalls.map((c) => [c.toolName, c.input])).toEqual([
      ["task", { subagent: "general", description: "Find the ferry times", prompt: "Find the ferry times" }],
      ["task", { subagent: "general", description: "Check the weather", prompt: "Check the weather [[fail]]" }],
      ["agent_swarm", { profile: "general", prompt_template: "Review {{item}}", items: ["a", "b"] }],
      ["batch_task", { prompt_template: "Rate {{item}}", items: ["1", "2"] }],
      ["batch_status", {}],
    ]);
    expect(log.sort()).toEqual(["batch:2", "status", "swarm:a,b", "task:Check the weather [[fail]]", "task:Find the ferry times"]);
    // Step 2 ran despite the [[fail]] inside the task line: that directive belongs to the sub-agent.
    expect(steps[1].finishReason).toBe("stop");
    // One human sentence per tool, never serialized JSON.
    expect(text).not.toMatch(/[{}]|"batch_id"/);
    expect(text).toContain("2 sub-agents finished:\n- Result for Find the ferry times");
    expect(text).toContain("The swarm finished.");
    expect(text).toContain("Started batch b-1 with 2 items; I'll report when it finishes.");
    expect(text).toContain("There are no batches on this thread yet.");
    // Long results are cut.
    const taskLine = text.split("\n").find((l) => l.startsWith("- Result for Find")) ?? "";
    expect(taskLine.length).toBeLessThan(200);
    expect(taskLine.endsWith("…")).toBe(true);
    const again = await generateText({
      model: fast,
      prompt: "task: Find the ferry times",
      tools: tools([]),
      stopWhen: stepCountIs(4),
    });
    expect(again.text).toMatch(/^The task sub-agent finished: Result for Find the ferry times/);
  });

  it("makes no tool calls when the tool is not offered or the last message is not the user's", async () => {
    const log: string[] = [];
    const { task: _task, ...noTask } = tools(log);
    const result = streamText({ model: fast, prompt: "task: Find the ferry times", tools: noTask, stopWhen: stepCountIs(3) });
    expect((await result.steps).flatMap((s) => s.toolCalls)).toEqual([]);
    expect(await result.text).toContain("task: Find the ferry times");
    const none = await generateText({ model: fast, prompt: "task: x", tools: tools(log), toolChoice: "none" });
    expect(none.toolCalls).toEqual([]);
    expect(log).toEqual([]);
    const { stream } = await fast.doStream({
      prompt: [
        { role: "user", content: [{ type: "text", text: "task: do it" }] },
        { role: "assistant", content: [{ type: "text", text: "Sure." }] },
      ],
      tools: [{ type: "function", name: "task", inputSchema: { type: "object" } }],
    });
    expect((await drain(stream)).some((p) => p.type === "tool-call")).toBe(false);
  });

  it("streams tool input deltas before the call", async () => {
    const { stream } = await fast.doStream(
      userCall("task: Draft the weekly update for the harbour team", {
        tools: [{ type: "function", name: "task", inputSchema: { type: "object" } }],
      }),
    );
    const parts = await drain(stream);
    const deltas = parts.filter((p) => p.type === "tool-input-delta").map((p) => (p.type === "tool-input-delta" ? p.delta : ""));
    const call = parts.find((p) => p.type === "tool-call");
    if (call?.type !== "tool-call") throw new Error("no tool call");
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join("")).toBe(call.input);
    expect(parts.at(-1)).toMatchObject({ type: "finish", finishReason: { unified: "tool-calls" } });
  });
});

describe("simulator answers a person can read", () => {
  // The task and swarm tools' own model outputs: text for a real model, the typed output beside it.
  const taskOutput = (prompt: string): TaskToolOutput => ({
    runId: `r-${prompt}`,
    status: prompt.includes("weather") ? "failed" : "completed",
    definition: "general",
    model: "simulator",
    usage: { inputTokens: 1, outputTokens: 1 },
    durationMs: 1,
    stopReason: null,
    result: prompt.includes("weather") ? "" : `Answer about ${prompt}.`,
    ...(prompt.includes("weather") ? { error: "provider error" } : {}),
  });
  const row = (item_id: string, status: "completed" | "failed") => ({
    item_id,
    status,
    profile: "general",
    duration_ms: 1,
    failure_class: status === "failed" ? "provider" : null,
    summary: status === "completed" ? `Review of ${item_id}.` : null,
    error: status === "failed" ? "provider error" : null,
    child_run_id: null,
    attempts: 1,
    resumed_from_run_id: null,
  });
  const swarmOutput: SwarmResult = {
    aggregate: {
      status: "partial",
      counts: { total: 3, queued: 0, running: 0, suspended: 0, completed: 2, failed: 1, cancelled: 0 },
      started: 3,
      concurrency: 3,
      effective_capacity: 3,
      duration_ms: 3,
      usage: { input_tokens: 3, output_tokens: 3 },
    },
    items: [row("a", "completed"), row("b", "completed"), row("c", "failed")],
  };
  const realTools = {
    task: tool({
      inputSchema: z.object({ subagent: z.string(), description: z.string(), prompt: z.string() }),
      execute: async (input) => taskOutput(input.prompt),
      toModelOutput: ({ output, input }) => taskModelOutput(output, input.description),
    }),
    agent_swarm: tool({
      inputSchema: z.object({ profile: z.string(), prompt_template: z.string(), items: z.array(z.string()) }),
      execute: async () => swarmOutput,
      toModelOutput: ({ output }) => swarmModelOutput(output),
    }),
    batch_status: tool({
      inputSchema: z.object({ batch_id: z.string().optional() }),
      execute: async () => ({
        batches: [{ batch_id: "df83ab12-0000", status: "completed", total: 5, succeeded: 3, failed: 2, cancelled: 0, running: 0, waiting: 0 }],
      }),
    }),
  };

  it("groups sub-agent results, counts a swarm and states batch progress in words", async () => {
    const result = await generateText({
      model: fast,
      prompt: "task: tides\ntask: weather\nswarm: Review {{item}} | a; b; c\nbatch status",
      tools: realTools,
      stopWhen: stepCountIs(3),
    });
    expect(result.text).toContain("2 sub-agents finished (1 without a result):\n- Answer about tides.\n- failed: provider error.");
    expect(result.text).toContain("The swarm finished: 2 of 3 items completed, 1 failed.");
    expect(result.text).toContain("Batch df83ab12 is completed: 3 / 5 done, 2 failed.");
    expect(result.text).not.toMatch(/[{}]|run r-/);
  });

  it.each([
    "What can you do?",
    "what can you do",
    "help",
    "WHAT CAN YOU DO",
    "What can you do？",
    "what can you do...",
    "Help!",
    "Hi, what can you do for me?",
    "What can you help with?",
    "how do I use this?",
  ])("answers %j with the phrasings", async (prompt) => {
    const { text } = await generateText({ model: fast, prompt });
    for (const phrase of ["task:", "swarm:", "batch:", "batch x300:", "batch status", "New batch"]) expect(text).toContain(phrase);
  });

  it.each(["What can you do with this list of cities?", "help me write a poem"])("takes %j as a request, not the help question", async (prompt) => {
    const { text } = await generateText({ model: fast, prompt });
    expect(text).not.toContain("batch x300:");
  });
});

describe("the lead's report after a task and after a batch settled", () => {
  const sentences = Array.from({ length: 14 }, (_, i) => `Fact ${i + 1} about the tides is written out in full here.`);
  const taskTool = (result: string) => ({
    task: tool({
      inputSchema: z.object({ subagent: z.string(), description: z.string(), prompt: z.string() }),
      execute: async (): Promise<TaskToolOutput> => ({
        runId: "r-1",
        status: "completed",
        definition: "general",
        model: "simulator",
        usage: { inputTokens: 1, outputTokens: 1 },
        durationMs: 1,
        stopReason: null,
        result,
      }),
      toModelOutput: ({ output, input }) => taskModelOutput(output, input.description),
    }),
  });
  const reportOf = async (result: string) =>
    (await generateText({ model: fast, prompt: "task: tides", tools: taskTool(result), stopWhen: stepCountIs(2) })).text;

  it("quotes a short result whole, and a long one by whole sentences, never cut mid-word", async () => {
    const short = sentences.slice(0, 3).join(" ");
    expect(await reportOf(short)).toBe(`The general sub-agent finished: ${short}`);

    const long = sentences.join(" ");
    const report = await reportOf(long);
    const quoted = report.replace("The general sub-agent finished: ", "").split("\n\n")[0]!;
    expect(long.startsWith(quoted)).toBe(true);
    expect(quoted.endsWith("here.")).toBe(true);
    expect(quoted.length).toBeGreaterThan(200);
    expect(report).toContain("(The whole answer is in the task card above.)");
    expect(report).not.toContain("…");

    // No sentence end at all: cut after a whole word, marked with "…".
    const words = "tidal ".repeat(200).trim();
    const cut = (await reportOf(words)).replace("The general sub-agent finished: ", "").split("\n\n")[0]!;
    expect(cut.endsWith("tidal…")).toBe(true);
    expect(words.startsWith(cut.slice(0, -1))).toBe(true);
  });

  it("labels a long task by its first whole words", () => {
    const [call] = parseToolCalls(`task: ${"ferry ".repeat(30)}`, new Set(["task"])).calls;
    const description = String(call!.input.description);
    expect(description.length).toBeLessThanOrEqual(80);
    expect(description.endsWith("ferry…")).toBe(true);
  });

  it("keeps a multi-line result's lines", async () => {
    const result = "Three facts:\n- one\n- two\n- three";
    expect(await reportOf(result)).toBe(`The general sub-agent finished:\n\n${result}`);
  });

  const notice: BatchSettledNotice = {
    kind: "batch_settled",
    batch_id: "ce574bc8-1111-2222-3333-444455556666",
    thread_id: "9f1e0000-0000-0000-0000-000000000001",
    subagent: "general",
    status: "completed",
    settlement: 1,
    total: 13,
    succeeded: 10,
    failed: 3,
    cancelled: 0,
    usage: { input_tokens: 12345, output_tokens: 678 },
    cost_usd: 0,
    failures: [
      { error: "Simulated model failure ([[fail]])", count: 2, item_keys: ["item-4", "item-9"] },
      { error: "timed out after 30 s", count: 1, item_keys: ["item-12"] },
    ],
    failures_sampled: false,
    verdicts: { passed: 0, failed: 0 },
    checks: [],
    check_failures: [],
  };
  const noticeTurn = (n: BatchSettledNotice) =>
    generateText({
      model: fast,
      system: "You are the lead agent of Flotilla.",
      messages: [
        {
          role: "user",
          content: [
            {
              type: "text",
              text: `[Automatic notice, not a user message] Durable batch ${n.batch_id} ${n.status}. [[fail]] [[chars:5]]`,
              providerOptions: noticeOptions(n),
            },
          ],
        },
      ],
      tools: taskTool("unused"),
    });

  it("answers a batch wake-up with what happened, what failed and where the results are", async () => {
    const result = await noticeTurn(notice);
    expect(result.toolCalls).toEqual([]);
    expect(result.text).not.toMatch(/Automatic notice|Simulated answer|Durable batch|You are the lead/);
    expect(result.text).toContain("Batch ce574bc8 finished: 10 of 13 items succeeded, 3 failed.");
    expect(result.text).toContain("12,345 input and 678 output tokens");
    expect(result.text).toContain("- 2 items (item-4, item-9): Simulated model failure ([[fail]]).");
    expect(result.text).toContain("- 1 item (item-12): timed out after 30 s.");
    expect(result.text).toContain(
      `[results.jsonl](/api/threads/${notice.thread_id}/subagent-batches/${notice.batch_id}/results.jsonl)`,
    );
    expect(result.text).toContain("The failed items can be retried from there.");
  });

  it("says when a retry settled the batch again, and when it was cancelled", async () => {
    const again = await noticeTurn({ ...notice, settlement: 2, succeeded: 13, failed: 0, failures: [] });
    expect(again.text).toMatch(/^Batch ce574bc8 finished again after the retry: all 13 items succeeded\./);
    expect(again.text).not.toContain("What failed");
    const cancelled = await noticeTurn({ ...notice, status: "cancelled", succeeded: 2, failed: 0, cancelled: 11, failures: [] });
    expect(cancelled.text).toMatch(/^Batch ce574bc8 was cancelled: 2 of 13 items had succeeded before it stopped, 11 cancelled\./);
  });
});

describe("simulated answers", () => {
  it("never repeat a sentence", async () => {
    for (let i = 0; i < 40; i++) {
      const { text } = await generateText({ model: fast, prompt: `describe the tides of port ${i}` });
      const sentences = text.replace(/^Simulated answer to "[^"]*"\. /, "").split(/(?<=\.) /);
      expect(new Set(sentences).size).toBe(sentences.length);
    }
  });
});
