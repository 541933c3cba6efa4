import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { findSwarmLive, SwarmCard } from "@/components/chat/swarm-card";
import type { SwarmItemRow, SwarmLiveData, SwarmResult } from "@/lib/api/swarm";

const row = (item_id: string, status: SwarmItemRow["status"], extra: Partial<SwarmItemRow> = {}): SwarmItemRow => ({
  item_id,
  status,
  profile: "general",
  duration_ms: 1200,
  failure_class: null,
  summary: null,
  error: null,
  child_run_id: "0b8e5a52-8f0e-4a8c-9d8f-3c1f1f1f1f1a",
  attempts: 1,
  resumed_from_run_id: null,
  ...extra,
});

const result = (items: SwarmItemRow[], status: SwarmResult["aggregate"]["status"]): SwarmResult => {
  const counts = { total: items.length, queued: 0, running: 0, suspended: 0, completed: 0, failed: 0, cancelled: 0 };
  for (const r of items) counts[r.status] += 1;
  return {
    aggregate: { status, counts, started: items.length, concurrency: 3, effective_capacity: 2, duration_ms: 4200, usage: { input_tokens: 1, output_tokens: 1 } },
    items,
  };
};

const render = (part: Parameters<typeof SwarmCard>[0]["part"], live?: SwarmLiveData | null) =>
  renderToStaticMarkup(createElement(SwarmCard, { part, live }));

describe("swarm card", () => {
  it("renders the settled result in input order with counts, bounded summaries and the trace", () => {
    const long = "x".repeat(5000);
    const out = result(
      [
        row("alpha", "completed", { summary: long }),
        row("beta", "failed", { failure_class: "rate_limit", error: "rate limited", attempts: 3 }),
        row("gamma", "cancelled", { child_run_id: null, attempts: 0, duration_ms: null, error: "cancelled before it started" }),
      ],
      "partial",
    );
    const live: SwarmLiveData = {
      ...out,
      tool_call_id: "call_1",
      trace: [
        { t: 0, type: "item_queued", item_id: "alpha" },
        { t: 10, type: "item_suspended", item_id: "beta", attempt: 1, delay_ms: 3000 },
        { t: 20, type: "capacity_changed", direction: "down", effective_capacity: 2 },
      ],
      trace_dropped: 0,
    };
    const html = render({ type: "tool-agent_swarm", toolCallId: "call_1", state: "output-available", output: out }, live);
    expect(html).toContain('data-status="partial"');
    expect(html).toContain("3 items · 1 completed · 1 failed · 1 cancelled");
    const order = ["alpha", "beta", "gamma"].map((id) => html.indexOf(`data-item-id="${id}"`));
    expect(order.every((n, i) => n > 0 && (i === 0 || n > order[i - 1]))).toBe(true);
    expect(html).not.toContain(long); // the row shows a bounded preview
    expect(html).toContain("rate limit");
    expect(html).toContain("3 attempts");
    expect(html).toContain("cancelled before it started");
    expect(html).toContain("Trace (3 events)");
    expect(html).toContain("rate limited on attempt 1; retry in 3.0 s");
    expect(html).toContain("capacity reduced to 2");
  });

  it("shows live rows while running and the rejection when nothing ran", () => {
    const live: SwarmLiveData = {
      ...result([row("a", "running"), row("b", "queued", { child_run_id: null, attempts: 0 })], "running"),
      tool_call_id: "call_2",
      trace: [],
      trace_dropped: 0,
    };
    const running = render({ type: "tool-agent_swarm", toolCallId: "call_2", state: "input-available" }, live);
    expect(running).toContain("Swarm running");
    expect(running).toContain('data-status="running"');
    expect(running).toContain("1 running");
    const rejected = render({
      type: "tool-agent_swarm",
      state: "output-available",
      output: { ...result([], "rejected"), rejection: { code: "validation_failed", message: "items: too many" } },
    });
    expect(rejected).toContain("Swarm rejected");
    expect(rejected).toContain("Nothing ran: items: too many");
  });

  it("finds the latest live part of its own tool call", () => {
    const a = { type: "data-swarm", id: "call_1", data: { ...result([row("a", "running")], "running"), trace: [], trace_dropped: 0, tool_call_id: "call_1" } };
    const b = { type: "data-swarm", id: "call_1", data: { ...result([row("a", "completed")], "completed"), trace: [], trace_dropped: 0, tool_call_id: "call_1" } };
    const other = { type: "data-swarm", id: "call_9", data: a.data };
    expect(findSwarmLive([a, b, other], "call_1")?.items[0].status).toBe("completed");
    expect(findSwarmLive([other], "call_1")).toBeNull();
    expect(findSwarmLive(undefined, "call_1")).toBeNull();
  });
});
