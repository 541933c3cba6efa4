import type { LanguageModelV3, LanguageModelV3CallOptions } from "@ai-sdk/provider";
import { generateText, jsonSchema, Output, stepCountIs, type UIMessageStreamWriter } from "ai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { configSchema, type FlotillaConfigInput } from "@/lib/config";
import { runSubagent } from "@/server/agent/executor";
import { getSubagentDefinition, resolveSubagent, type SubagentDefinition } from "@/server/agent/registry";
import { createRun } from "@/server/agent/runs";
import { readTypedAnswer } from "@/server/agent/structured-output";
import { createTaskTool, type TaskToolOutput } from "@/server/agent/tools/task";
import { prepareOutputSchema } from "@/server/runtime/output-schema";
import { resolveModel } from "@/server/models";
import { createSimulatorModel, resetSimulatorOnceState } from "@/server/models/simulator";
import { latestUserText } from "@/server/models/simulator/prompt";
import type { ResolvedModel } from "@/server/models/types";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { type FakeOpenAI, startFakeOpenAI } from "../helpers/fake-openai";
import { SIMULATED } from "../swarm/support";
import { runRow, runtimeFor, testConfig, userAndThread } from "./support";

/** Typed results through runSubagent: the structured answer, its validation and the one repair turn. */

let database: TestDatabase;
let ids: { userId: string; threadId: string };

beforeAll(async () => {
  database = await createTestDatabase();
  ids = await userAndThread(database.db, "typed");
});
beforeEach(() => resetSimulatorOnceState());

const LABEL_SCHEMA = {
  type: "object",
  properties: {
    label: { enum: ["billing", "hardware", "other"] },
    summary: { type: "string", maxLength: 40 },
    confidence: { type: "number", minimum: 0, maximum: 1 },
  },
  required: ["label", "summary"],
  additionalProperties: false,
};

const typedGeneral = (): SubagentDefinition => ({ ...getSubagentDefinition("general", testConfig()), outputSchema: LABEL_SCHEMA });

interface SeenCall {
  userText: string;
  responseFormat: LanguageModelV3CallOptions["responseFormat"];
  toolChoice: LanguageModelV3CallOptions["toolChoice"];
  system: string;
}

/** The real simulator, recording each call's response format. */
function recordingModel(): ResolvedModel & { calls: SeenCall[] } {
  const inner = createSimulatorModel({ latencyMs: 5 });
  const calls: SeenCall[] = [];
  const note = (o: LanguageModelV3CallOptions) =>
    calls.push({
      userText: latestUserText(o.prompt),
      responseFormat: o.responseFormat,
      toolChoice: o.toolChoice,
      system: o.prompt.map((m) => (m.role === "system" ? m.content : "")).join(""),
    });
  const model: LanguageModelV3 = {
    ...inner,
    doGenerate: (o) => {
      note(o);
      return inner.doGenerate(o);
    },
    doStream: (o) => {
      note(o);
      return inner.doStream(o);
    },
  };
  return { ...SIMULATED, model, calls };
}

function run(prompt: string, model: ResolvedModel, definition = typedGeneral(), kind: "task" | "batch_item" = "task") {
  return runSubagent(database.db, {
    ...ids,
    kind,
    definition,
    prompt,
    model,
    signal: new AbortController().signal,
    runtime: runtimeFor(),
  });
}

describe("typed results in runSubagent", () => {
  it("answers one JSON value valid against the schema, asked as the provider's JSON-schema format", async () => {
    const model = recordingModel();
    const result = await run("Ticket: the printer on floor 3 is jammed.", model);
    expect(result.status).toBe("completed");
    // Strings come from the prompt, within maxLength (40): cut after a whole word.
    expect(result.output).toEqual({ label: "billing", summary: "Ticket: the printer on floor 3 is…", confidence: 0 });
    expect(result.text).toBe(JSON.stringify(result.output));
    expect(model.calls).toHaveLength(1);
    expect(model.calls[0].responseFormat).toEqual({ type: "json", schema: LABEL_SCHEMA });
    // The schema is also stated in the system prompt, for providers that ignore the format.
    expect(model.calls[0].system).toContain(JSON.stringify(LABEL_SCHEMA));
    const row = await runRow(database.db, result.runId);
    expect(row).toMatchObject({ status: "completed", result: result.text, error: null });
  });

  it("runs tool steps first, then gives the typed answer", async () => {
    const model = recordingModel();
    const result = await run("Ticket: what time is it? [[tool:current_time {}]]", model);
    expect(result.status).toBe("completed");
    expect(result.toolCalls.map((c) => [c.name, c.status])).toEqual([["current_time", "ok"]]);
    expect(result.output).toMatchObject({ label: "billing" });
    expect(model.calls).toHaveLength(2);
    expect(model.calls.every((c) => c.responseFormat?.type === "json")).toBe(true);
  });

  it("repairs an invalid first answer in one more turn quoting the validator's errors; usage counts both", async () => {
    const model = recordingModel();
    const result = await run('Ticket: refund please [[json-once:{"label": "refunds", "summary": 5}]]', model);
    expect(result.status).toBe("completed");
    expect(result.output).toMatchObject({ label: "billing", summary: "Ticket: refund please" });
    expect(model.calls).toHaveLength(2);
    const repair = model.calls[1];
    expect(repair.userText).toContain('/label must be equal to one of the allowed values: "billing", "hardware", "other"');
    expect(repair.userText).toContain("/summary must be string");
    expect(repair.toolChoice).toEqual({ type: "none" });
    const once = await run("Ticket: refund please", recordingModel());
    expect(result.usage.inputTokens).toBeGreaterThan(once.usage.inputTokens * 2);
    expect(result.usage.outputTokens).toBeGreaterThan(once.usage.outputTokens);
    const row = await runRow(database.db, result.runId);
    const transcript = row.transcript as Array<{ role: string }>;
    expect(transcript.map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
    expect(row).toMatchObject({ inputTokens: result.usage.inputTokens, outputTokens: result.usage.outputTokens });
  });

  it("fails with invalid_output naming path and message when the repair is still invalid", async () => {
    const model = recordingModel();
    const result = await run('Ticket [[json:{"label": "refunds", "summary": "x", "extra": true}]]', model);
    expect(result).toMatchObject({ status: "failed", errorClass: "invalid_output", stopReason: "invalid_output" });
    expect(result.error).toBe(
      'invalid_output: / must NOT have additional properties ("extra"); /label must be equal to one of the allowed values: "billing", "hardware", "other"',
    );
    expect(result.output).toBeUndefined();
    expect(model.calls).toHaveLength(2);
    const row = await runRow(database.db, result.runId);
    expect(row).toMatchObject({ status: "failed", error: result.error });

    // Not JSON at all (the AI SDK refuses to parse it): read the same way, repaired the same way.
    const notJsonModel = recordingModel();
    const notJson = await run("Ticket [[json:sure, here you go]]", notJsonModel);
    expect(notJson.error).toMatch(/^invalid_output: \/ the answer is not valid JSON \(/);
    expect(notJsonModel.calls.map((c) => c.userText)).toEqual([
      "Ticket [[json:sure, here you go]]",
      expect.stringMatching(/^Your answer is not valid against the required JSON Schema: \/ the answer is not valid JSON/),
    ]);
    const notJsonRow = await runRow(database.db, notJson.runId);
    expect((notJsonRow.transcript as Array<{ role: string }>).map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
    expect(notJsonRow.result).toBe("sure, here you go");
  });

  it("fails a schema that refers to itself without end as invalid_output without asking the model, not a crash", async () => {
    const definition = { ...typedGeneral(), outputSchema: { allOf: [{ $ref: "#" }], type: "string" } };
    const model = recordingModel();
    const result = await run("Loop", model, definition);
    expect(result).toMatchObject({ status: "failed", errorClass: "invalid_output" });
    expect(result.error).toBe(
      "invalid_output: output_schema: a reference cycle returns to the same value without end (it never moves to a property or an item)",
    );
    expect(model.calls).toHaveLength(0);
  });

  it("gives a batch item (deferred run row) its output", async () => {
    const result = await runSubagent(database.db, {
      ...ids,
      kind: "batch_item",
      definition: typedGeneral(),
      prompt: "Ticket: screen flickers",
      model: recordingModel(),
      signal: new AbortController().signal,
      runtime: runtimeFor(),
      returnRunRow: true,
    });
    expect(result.status).toBe("completed");
    expect(result.output).toMatchObject({ label: "billing", summary: "Ticket: screen flickers" });
    expect(result.runRow).toMatchObject({ status: "completed", result: result.text });
  });

  it("leaves a definition without a schema as it was: plain text, no response format", async () => {
    const model = recordingModel();
    const result = await run("Say hello [[json:1]]", model, getSubagentDefinition("general", testConfig()));
    expect(result.text).toMatch(/^Simulated answer to "Say hello"/);
    expect(result.output).toBeUndefined();
    expect(model.calls[0].responseFormat).toBeUndefined();
  });
});

describe("readTypedAnswer", () => {
  const schema = prepareOutputSchema(LABEL_SCHEMA);
  it("takes JSON, also inside a Markdown fence, and names what is wrong otherwise", async () => {
    expect(await readTypedAnswer(' {"label": "other", "summary": "s"}\n', schema)).toEqual({ ok: true, value: { label: "other", summary: "s" } });
    expect(await readTypedAnswer('```json\n{"label": "other", "summary": "s"}\n```', schema)).toMatchObject({ ok: true });
    expect(await readTypedAnswer("  ", schema)).toEqual({ ok: false, errors: "/ the answer is empty: expected one JSON value" });
    expect(await readTypedAnswer('{"label": "other"}', schema)).toEqual({ ok: false, errors: "/ must have required property 'summary'" });
  });
});

describe("a configured definition with output_schema, through the task tool", () => {
  it("returns the typed answer as the task's result", async () => {
    const input: FlotillaConfigInput = {
      subagents: {
        definitions: [
          { name: "labeler", description: "labels tickets", system_prompt: "You label tickets.", tool_groups: ["clock"], output_schema: LABEL_SCHEMA },
        ],
      },
    };
    const config = configSchema.parse(input);
    const runtime = createSubagentRuntime(config);
    expect(resolveSubagent(config, "labeler", recordingModel()).definition.outputSchema).toEqual(LABEL_SCHEMA);
    const lead = await createRun(database.db, { ...ids, kind: "lead", definition: "lead", model: "simulator", status: "running" });
    const model = recordingModel();
    const controller = new AbortController();
    const writer = { write: () => {}, merge: () => {}, onError: undefined } as unknown as UIMessageStreamWriter;
    const task = createTaskTool({ db: database.db, config, ...ids, runId: lead.id, model, abortSignal: controller.signal, writer, runtime });
    const result = await generateText({
      model: model.model,
      messages: [{ role: "user", content: '[[call:task {"subagent":"labeler","description":"label","prompt":"Ticket: card declined"}]]' }],
      tools: { task },
      stopWhen: stepCountIs(2),
    });
    const out = result.steps[0].toolResults[0].output as TaskToolOutput;
    expect(out.status).toBe("completed");
    expect(JSON.parse(out.result)).toEqual({ label: "billing", summary: "Ticket: card declined", confidence: 0 });
    // The lead's own calls never carry a response format; the labeler's do.
    expect(model.calls[0].responseFormat).toBeUndefined();
    expect(model.calls.find((c) => c.userText === "Ticket: card declined")?.responseFormat).toEqual({ type: "json", schema: LABEL_SCHEMA });
  });
});

describe("typed results against an OpenAI-compatible endpoint", () => {
  let fake: FakeOpenAI;
  const answers = ['{"label": "refunds", "summary": "x"}', '{"label": "other", "summary": "card declined"}'];

  beforeAll(async () => {
    fake = await startFakeOpenAI({ handler: (_req, index) => ({ type: "text", text: answers[index] ?? answers[1] }) });
  });
  afterAll(() => fake.close());

  it("sends response_format json_schema (not strict), then repairs through a second request", async () => {
    const env = { MODEL_BASE_URL: fake.url, MODEL_API_KEY: "sk-typed", MODEL_NAME: "fake-gpt" };
    const model = resolveModel(testConfig(env), env);
    const result = await run("Ticket: card declined", model);
    expect(result.status).toBe("completed");
    expect(result.output).toEqual({ label: "other", summary: "card declined" });
    expect(fake.requests).toHaveLength(2);
    const first = fake.requests[0].body;
    expect(first?.response_format).toEqual({
      type: "json_schema",
      json_schema: { schema: LABEL_SCHEMA, strict: false, name: "response" },
    });
    // JSON-schema mode together with the tools: the answer comes after any tool steps.
    expect(first?.tools?.map((t) => t.function?.name)).toContain("current_time");
    const second = fake.requests[1].body;
    expect(second?.response_format).toEqual(first?.response_format);
    expect(second?.tool_choice).toBe("none");
    const repair = second?.messages?.at(-1);
    expect(repair?.role).toBe("user");
    expect(JSON.stringify(repair?.content)).toContain("/label must be equal to one of the allowed values");
    expect(second?.messages?.at(-2)).toMatchObject({ role: "assistant", content: answers[0] });
  });

  it("keeps strict json_schema when a caller asks for it", async () => {
    const env = { MODEL_BASE_URL: fake.url, MODEL_API_KEY: "sk-typed", MODEL_NAME: "fake-gpt" };
    const { model } = resolveModel(testConfig(env), env);
    const before = fake.requests.length;
    await generateText({
      model,
      prompt: "strict please",
      output: Output.object({ schema: jsonSchema(LABEL_SCHEMA), name: "label" }),
      providerOptions: { openaiCompatible: { strictJsonSchema: true } },
    });
    expect(fake.requests[before].body?.response_format).toEqual({
      type: "json_schema",
      json_schema: { schema: LABEL_SCHEMA, strict: true, name: "label" },
    });
  });
});
