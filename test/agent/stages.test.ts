import type { ModelMessage, ToolExecutionOptions } from "ai";
import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { SubagentUsage } from "@/lib/api/subagents";
import { configSchema } from "@/lib/config";
import { answerWithModel } from "@/server/agent/executor/model-call";
import { RunRow } from "@/server/agent/executor/settlement";
import { askForApproval, runToolset } from "@/server/agent/executor/toolset";
import { addStepUsage, NO_USAGE, type StepUsage, sumUsage } from "@/server/agent/executor/usage";
import { getSubagentDefinition } from "@/server/agent/registry";
import { typedOutput } from "@/server/agent/structured-output";
import { resetSimulatorOnceState } from "@/server/models/simulator";
import { ToolCallRecorder } from "@/server/tools";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { recordingSimulator, runRow, testConfig, userAndThread } from "./support";

/** The executor's stages called one by one, as runSubagent composes them (server/agent/executor.ts). */

let database: TestDatabase;
let ids: { userId: string; threadId: string };

beforeAll(async () => {
  database = await createTestDatabase();
  ids = await userAndThread(database.db, "stages");
});
beforeEach(() => resetSimulatorOnceState());

const callOptions = (toolCallId: string): ToolExecutionOptions => ({ toolCallId, messages: [] });

describe("the toolset stage", () => {
  it("gives only the calls tools.require_approval matches the approval request, and writes a deferred run row before a tool runs", async () => {
    const config = configSchema.parse({ tools: { require_approval: ["text/count_*"] } });
    const definition = { ...getSubagentDefinition("general", config), toolGroups: ["clock", "text"] };
    const model = recordingSimulator();
    const signal = new AbortController().signal;
    const opts = { ...ids, kind: "batch_item" as const, definition, model, prompt: "count this", signal };
    const row = await RunRow.open(database.db, opts);
    expect(row.deferred).toBe(true);
    const recorder = new ToolCallRecorder();
    const tools = await runToolset({
      db: database.db,
      config,
      definition,
      ...ids,
      runId: row.id,
      signal,
      recorder,
      approval: askForApproval,
      ensureRunRow: row.ensure,
    });

    expect(Object.keys(tools).sort()).toEqual(["count_text", "current_time"]);
    expect(tools.count_text.needsApproval).toBe(true);
    expect(tools.current_time.needsApproval).toBeFalsy();

    // Nothing is written until a tool is about to run; then the row exists, running.
    expect(await runRow(database.db, row.id)).toBeUndefined();
    await tools.current_time.execute?.({}, callOptions("call-1"));
    expect(await runRow(database.db, row.id)).toMatchObject({ status: "running", kind: "batch_item", definition: "general" });
    expect(recorder.calls.map((c) => [c.name, c.status])).toEqual([["current_time", "ok"]]);

    // The settlement stage finishes that row with the recorded call.
    const usage = { inputTokens: 3, outputTokens: 2 };
    const final = { status: "completed" as const, stopReason: "stop", result: "done", error: null, usage, toolCalls: recorder.calls };
    expect(await row.settle(final, true)).toEqual({ kept: true });
    expect(await runRow(database.db, row.id)).toMatchObject({ status: "completed", result: "done", inputTokens: 3, toolCallCount: 1 });
  });
});

describe("the model call and usage stages", () => {
  it("repairs an invalid typed answer in one more call, and usage sums every step of both calls", async () => {
    const config = testConfig();
    const schema = { type: "object", properties: { label: { enum: ["billing", "other"] } }, required: ["label"] };
    const model = recordingSimulator();
    const steps: StepUsage[] = [];
    let usage: SubagentUsage = NO_USAGE;
    const input: ModelMessage[] = [{ role: "user", content: 'Ticket: refund please [[json-once:{"label": "refunds"}]]' }];
    const outcome = await answerWithModel(
      {
        model: model.model,
        system: getSubagentDefinition("general", config).systemPrompt,
        tools: {},
        typed: typedOutput(schema),
        turnsLeft: 4,
        signal: new AbortController().signal,
        progress: { transcript: input },
        onStep: (step) => {
          steps.push(step.usage);
          usage = addStepUsage(usage, step.usage);
        },
      },
      input,
    );

    expect(outcome.kind).toBe("answered");
    if (outcome.kind !== "answered") return;
    expect(outcome.output).toEqual({ label: "billing" });
    expect(JSON.parse(outcome.answer.text)).toEqual({ label: "billing" });
    expect(model.calls).toHaveLength(2);
    expect(model.calls[1]?.userText).toContain("/label must be equal to one of the allowed values");
    expect(outcome.answer.transcript.map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
    // One step per call; the total is their sum, and both spent tokens.
    expect(steps).toHaveLength(2);
    expect(steps.every((s) => (s.inputTokens ?? 0) > 0 && (s.outputTokens ?? 0) > 0)).toBe(true);
    expect(usage).toEqual(sumUsage(steps));
    expect(usage.inputTokens).toBe((steps[0]?.inputTokens ?? 0) + (steps[1]?.inputTokens ?? 0));
  });
});
