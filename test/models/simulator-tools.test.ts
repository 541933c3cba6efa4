import { generateText, stepCountIs, streamText, tool } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createSimulatorModel, stripDirectives } from "@/server/models/simulator";
import { parseToolDirectives } from "@/server/models/simulator/directives";

/** [[tool:NAME {json}]] and [[echo]] exactly as DESIGN.md states them. */

const model = createSimulatorModel({ latencyMs: 0 });
const seen: string[] = [];
const tools = {
  shout: tool({
    inputSchema: z.object({ text: z.string() }),
    execute: async ({ text }) => {
      seen.push(`shout:${text}`);
      return text.toUpperCase();
    },
  }),
  clock: tool({
    inputSchema: z.object({}),
    execute: async () => {
      seen.push("clock");
      return { now: "2026-12-01T09:00:00.000Z" };
    },
  }),
  long: tool({ inputSchema: z.object({}), execute: async () => `${"a".repeat(1_999)}BC` }),
};

describe("[[tool:NAME {json}]]", () => {
  it("runs several directives in order, one model step each, and answers with each output verbatim", async () => {
    seen.length = 0;
    const r = await generateText({
      model,
      tools,
      stopWhen: stepCountIs(10),
      prompt: 'First [[tool:shout {"text":"a ]] b"}]] then [[tool:clock]] and [[tool:shout {"text": "two"}]]',
    });
    expect(seen).toEqual(["shout:a ]] b", "clock", "shout:two"]);
    expect(r.steps.map((s) => s.toolCalls.map((c) => c.toolName))).toEqual([["shout"], ["clock"], ["shout"], []]);
    expect(r.steps[0].toolCalls[0].input).toEqual({ text: "a ]] b" });
    expect(r.text).toContain("shout:\nA ]] B");
    expect(r.text).toContain('clock:\n{"now":"2026-12-01T09:00:00.000Z"}');
    expect(r.text).toContain("shout:\nTWO");
    expect(r.text.indexOf("A ]] B")).toBeLessThan(r.text.indexOf("TWO"));
  });

  it("repeats the first 2,000 characters of a tool's output", async () => {
    const r = await generateText({ model, tools, stopWhen: stepCountIs(4), prompt: "[[tool:long {}]]" });
    expect(r.text).toContain(`long:\n${"a".repeat(1_999)}B`);
    expect(r.text).not.toContain("BC");
  });

  it("calls a tool that is not offered; the SDK's error comes back as that tool's output", async () => {
    const r = await generateText({ model, tools, stopWhen: stepCountIs(4), prompt: "[[tool:nowhere {}]]" });
    expect(r.steps[0].content.some((p) => p.type === "tool-error")).toBe(true);
    expect(r.text).toMatch(/nowhere:\nerror: .*unavailable tool 'nowhere'/);
  });

  it("streams the same way and leaves malformed directives as text", async () => {
    const s = streamText({ model, tools, stopWhen: stepCountIs(4), prompt: "[[tool:clock]] [[tool:shout {bad json}]]" });
    expect((await s.steps).length).toBe(2);
    expect(parseToolDirectives("[[tool:shout {bad json}]]").calls).toEqual([]);
    expect(stripDirectives("x [[tool:clock]] [[echo]] y").replace(/\s+/g, " ")).toBe("x y");
  });
});

describe("[[echo]]", () => {
  it("answers with the rest of the prompt verbatim, directive removed", async () => {
    const body = "# Report\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```ts\nconst x = 1;\n```";
    const r = await generateText({ model, prompt: `[[echo]]\n${body}` });
    expect(r.text).toBe(body);
    const streamed = streamText({ model, prompt: `Say: [[echo]] hello *world*` });
    expect(await streamed.text).toBe("Say:  hello *world*");
  });
});

describe("[[tool:...]] inside delegation grammar", () => {
  it("belongs to the delegated prompt: the caller makes the task call, the sub-agent's prompt keeps the directive", async () => {
    const inputs: unknown[] = [];
    const task = tool({
      inputSchema: z.object({ subagent: z.string(), description: z.string(), prompt: z.string() }),
      execute: async (input) => {
        inputs.push(input);
        return "done";
      },
    });
    const r = await generateText({
      model,
      tools: { task, shout: tools.shout },
      stopWhen: stepCountIs(4),
      prompt: 'task: Count [[tool:count_text {"text":"x"}]]',
    });
    expect(r.steps[0].toolCalls.map((c) => c.toolName)).toEqual(["task"]);
    expect(inputs[0]).toMatchObject({ prompt: 'Count [[tool:count_text {"text":"x"}]]' });
    expect(r.text).toContain("The task sub-agent finished");
  });
});
