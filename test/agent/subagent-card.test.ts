import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { findSubagentLive, SubagentCard, subagentView } from "@/components/chat/subagent-card";
import type { RunDetail } from "@/lib/api/runs";
import type { SubagentDataPart, TaskToolOutput } from "@/server/agent/tools/task";

const RUN = "0b8e5a52-8f0e-4a8c-9d8f-3c1f1f1f1f1a";
const input = { subagent: "researcher", description: "Check the numbers", prompt: "..." };
const live = (status: SubagentDataPart["status"], extra: Partial<SubagentDataPart> = {}): SubagentDataPart => ({
  runId: RUN,
  toolCallId: "call_1",
  description: "Check the numbers",
  definition: "researcher",
  model: "simulator",
  status,
  usage: { inputTokens: 120, outputTokens: 40 },
  durationMs: 900,
  ...extra,
});
const row = (status: RunDetail["status"]): RunDetail => ({
  id: RUN,
  thread_id: "t",
  parent_run_id: "p",
  root_run_id: "p",
  kind: "task",
  definition: "researcher",
  model: "simulator",
  tool_call_id: "call_1",
  depth: 1,
  status,
  stop_reason: status === "cancelled" ? "stopped" : null,
  error: status === "cancelled" ? "stopped by the user" : null,
  usage: { input_tokens: 130, output_tokens: 45, cached_input_tokens: 0, cache_write_tokens: 0 },
  tool_calls: 0,
  cost_usd: 0,
  tool_call_list: [],
  created_at: "2026-01-01T00:00:00.000Z",
  started_at: "2026-01-01T00:00:01.000Z",
  finished_at: "2026-01-01T00:00:03.000Z",
  duration_ms: 2000,
  stop_report: null,
});
const render = (view: ReturnType<typeof subagentView>) => renderToStaticMarkup(createElement(SubagentCard, { view }));

describe("subagent card", () => {
  it("finds the latest live part of its own tool call", () => {
    const parts = [
      { type: "data-subagent", id: RUN, data: live("pending") },
      { type: "data-subagent", id: "other", data: live("running", { toolCallId: "call_2", runId: "other" }) },
      { type: "tool-task", toolCallId: "call_1" },
      { type: "data-subagent", id: RUN, data: live("running") },
    ];
    expect(findSubagentLive(parts, "call_1")?.status).toBe("running");
    expect(findSubagentLive(parts, "call_3")).toBeNull();
  });

  it("shows pending as waiting for a slot, with definition, model and tokens", () => {
    const html = render(subagentView({ state: "input-available", input }, live("pending"), undefined));
    expect(html).toContain('data-status="pending"');
    expect(html).toContain("waiting for a slot");
    expect(html).toContain("researcher");
    expect(html).toContain("Check the numbers");
    expect(html).toContain("simulator");
    expect(html).toContain("120 in · 40 out");
  });

  it("prefers the final tool result over live parts", () => {
    const output: TaskToolOutput = {
      runId: RUN,
      status: "completed",
      definition: "researcher",
      model: "simulator",
      usage: { inputTokens: 200, outputTokens: 80 },
      durationMs: 1500,
      stopReason: "stop",
      result: "The numbers add up.",
    };
    const html = render(subagentView({ state: "output-available", input, output }, live("running"), row("running")));
    expect(html).toContain('data-status="completed"');
    expect(html).toContain("200 in · 80 out");
    expect(html).toContain("1.5 s");
    expect(html).toContain("The numbers add up.");
  });

  it("takes the run row when it moved past the last live part (stopped, or restarted)", () => {
    const cancelled = render(subagentView({ state: "input-available", input }, live("running"), row("cancelled")));
    expect(cancelled).toContain('data-status="cancelled"');
    expect(cancelled).toContain("stopped by the user");
    const interrupted = render(subagentView({ state: "input-available", input }, live("running"), row("interrupted")));
    expect(interrupted).toContain('data-status="interrupted"');
    expect(interrupted).toMatch(/not restarted/);
  });

  it("labels every status", () => {
    const labels: Record<string, string> = {
      running: "running",
      failed: "failed",
      timed_out: "timed out",
      not_run: "not run",
    };
    for (const [status, label] of Object.entries(labels)) {
      const html = render({ ...subagentView({ state: "input-available", input }, live("running"), undefined), status: status as never });
      expect(html).toContain(`>${label}<`);
    }
  });
});
