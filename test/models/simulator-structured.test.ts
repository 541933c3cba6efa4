import type { LanguageModelV3CallOptions, LanguageModelV3Prompt } from "@ai-sdk/provider";
import { generateText, jsonSchema, Output } from "ai";
import { beforeEach, describe, expect, it } from "vitest";
import { JUDGE_OUTPUT_NAME } from "@/lib/api/batch-data";
import { repairOptions } from "@/lib/api/model-facts";
import { createSimulatorModel, resetSimulatorOnceState } from "@/server/models/simulator";
import { parseJsonDirective, stripDirectives } from "@/server/models/simulator/directives";
import { jsonAnswer, schemaValue } from "@/server/models/simulator/structured";
import { compileOutputSchema, schemaErrors } from "@/server/runtime/output-schema";

const sim = createSimulatorModel({ latencyMs: 0 });

const PROMPT = "Classify this support ticket: the printer on floor 3 is jammed again and nobody answers.";

async function ask(prompt: LanguageModelV3Prompt, responseFormat?: LanguageModelV3CallOptions["responseFormat"]) {
  const result = await sim.doGenerate({ prompt, responseFormat });
  const text = result.content.map((p) => (p.type === "text" ? p.text : "")).join("");
  return { text, usage: result.usage };
}

const user = (text: string, repair = false): LanguageModelV3Prompt[number] => ({
  role: "user",
  content: [{ type: "text", text, ...(repair ? { providerOptions: repairOptions() } : {}) }],
});

// A dozen schemas a batch might use; each generated value must pass Ajv.
const SCHEMAS: Record<string, Record<string, unknown>> = {
  label: { type: "object", properties: { label: { enum: ["billing", "hardware", "other"] } }, required: ["label"], additionalProperties: false },
  scalars: {
    type: "object",
    properties: {
      summary: { type: "string", minLength: 5, maxLength: 20 },
      score: { type: "number", minimum: 0.5, maximum: 1 },
      count: { type: "integer", exclusiveMinimum: 2, maximum: 10 },
      ok: { type: "boolean" },
      nothing: { type: "null" },
      fixed: { const: "v1" },
    },
    required: ["summary", "score", "count", "ok"],
  },
  formats: {
    type: "object",
    properties: {
      email: { type: "string", format: "email" },
      when: { type: "string", format: "date-time" },
      day: { type: "string", format: "date" },
      site: { type: "string", format: "uri" },
      id: { type: "string", format: "uuid" },
    },
  },
  arrays: {
    type: "object",
    properties: {
      tags: { type: "array", items: { type: "string" }, minItems: 3, uniqueItems: true },
      levels: { type: "array", items: { enum: ["a", "b", "c"] }, minItems: 2, maxItems: 2, uniqueItems: true },
      pair: { type: "array", items: [{ type: "string" }, { type: "integer" }], additionalItems: false },
    },
    required: ["tags", "levels"],
  },
  refs: {
    type: "object",
    properties: { person: { $ref: "#/$defs/person" }, place: { $ref: "#/definitions/place" } },
    $defs: { person: { type: "object", properties: { name: { type: "string" }, age: { type: "integer", minimum: 18 } }, required: ["name"] } },
    definitions: { place: { type: "string", maxLength: 4 } },
  },
  anyOf: { type: "object", properties: { value: { anyOf: [{ type: "integer", minimum: 5 }, { type: "string" }] } }, required: ["value"] },
  oneOf: { oneOf: [{ type: "object", properties: { kind: { const: "a" } }, required: ["kind"] }, { type: "string" }] },
  allOf: { allOf: [{ type: "object", properties: { a: { type: "string" } }, required: ["a"] }, { properties: { b: { type: "number", maximum: -3 } }, required: ["b"] }] },
  recursive: {
    type: "object",
    properties: { name: { type: "string" }, children: { type: "array", items: { $ref: "#" } } },
    required: ["name"],
  },
  topLevelArray: { type: "array", items: { type: "object", properties: { x: { type: "integer", multipleOf: 5, minimum: 3 } }, required: ["x"] } },
  topLevelString: { type: "string", maxLength: 12 },
  draft2020: {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    type: "object",
    properties: { row: { type: "array", prefixItems: [{ type: "string" }, { type: "boolean" }], items: false }, n: { type: ["null", "number"], exclusiveMaximum: 0 } },
    required: ["row", "n"],
  },
};

describe("simulator: a value valid against a schema", () => {
  beforeEach(() => resetSimulatorOnceState());

  for (const [name, schema] of Object.entries(SCHEMAS)) {
    it(`${name}: valid under Ajv and deterministic`, () => {
      const value = schemaValue(schema, PROMPT);
      const validate = compileOutputSchema(schema);
      expect(validate(value), `${JSON.stringify(value)}: ${schemaErrors(validate)}`).toBe(true);
      expect(schemaValue(schema, PROMPT)).toEqual(value);
    });
  }

  it("takes the first enum value, every property, strings from the prompt and minimum numbers", () => {
    expect(schemaValue(SCHEMAS.label, PROMPT)).toEqual({ label: "billing" });
    const value = schemaValue(
      { type: "object", properties: { topic: { type: "string" }, n: { type: "integer", minimum: 3 }, x: { type: "number" }, flag: { type: "boolean" } } },
      `${PROMPT} [[sleep:5]]`,
    ) as Record<string, unknown>;
    expect(Object.keys(value)).toEqual(["topic", "n", "x", "flag"]);
    expect(value.topic).toMatch(/^Classify this support ticket: the printer on floor 3/);
    expect(value.topic).not.toContain("[[");
    expect(String(value.topic).length).toBeLessThanOrEqual(80);
    expect(value).toMatchObject({ n: 3, x: 0, flag: true });
  });

  it("ends a schema that folds itself in (allOf or $ref back to the root, $refs in a loop)", () => {
    expect(schemaValue({ allOf: [{ $ref: "#" }], type: "string" }, "x")).toBe("x");
    expect(schemaValue({ $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }, "x")).toBe("x");
  });

  it("stops a schema that recurses without end", () => {
    const value = schemaValue(SCHEMAS.recursive, "tree") as { children: unknown[] };
    let depth = 0;
    for (let node: { children?: unknown[] } | undefined = value; node?.children?.length; node = node.children[0] as typeof node) depth++;
    expect(depth).toBeGreaterThan(0);
    expect(depth).toBeLessThan(10);
  });
});

describe("simulator: JSON response formats", () => {
  beforeEach(() => resetSimulatorOnceState());
  const schema = SCHEMAS.label;

  it("answers a schema-valid value for a json format with a schema, with usage proportional to length", async () => {
    const { text, usage } = await ask([user(PROMPT)], { type: "json", schema });
    expect(JSON.parse(text)).toEqual({ label: "billing" });
    expect(usage.outputTokens.total).toBe(Math.ceil(text.length / 4));
  });

  it("wraps the usual answer without a schema", async () => {
    const { text } = await ask([user(PROMPT)], { type: "json" });
    const value = JSON.parse(text);
    expect(Object.keys(value)).toEqual(["answer"]);
    expect(value.answer).toMatch(/^Simulated answer to "Classify this support ticket/);
  });

  it("[[json:VALUE]] answers VALUE verbatim, valid or not, every time (also in a repair turn)", async () => {
    const prompt = `${PROMPT} [[json:{"label": "spam"}]]`;
    expect((await ask([user(prompt)], { type: "json", schema })).text).toBe('{"label": "spam"}');
    expect((await ask([user(prompt)], { type: "json", schema })).text).toBe('{"label": "spam"}');
    const repair = [user(prompt), { role: "assistant" as const, content: [{ type: "text" as const, text: "x" }] }, user("fix it", true)];
    expect((await ask(repair, { type: "json", schema })).text).toBe('{"label": "spam"}');
    expect((await ask([user("[[json:not json at all]]")], { type: "json" })).text).toBe("not json at all");
    expect((await ask([user("[[json:[[1]]]] tail")], { type: "json" })).text).toBe("[[1]]");
  });

  it("[[json-once:VALUE]] answers VALUE the first time only; the repair turn gets a valid value", async () => {
    const prompt = `${PROMPT} [[json-once:{"label": 7}]]`;
    expect((await ask([user(prompt)], { type: "json", schema })).text).toBe('{"label": 7}');
    const repair = [user(prompt), { role: "assistant" as const, content: [{ type: "text" as const, text: '{"label": 7}' }] }, user("fix it", true)];
    expect(JSON.parse((await ask(repair, { type: "json", schema })).text)).toEqual({ label: "billing" });
    expect(JSON.parse((await ask([user(prompt)], { type: "json", schema })).text)).toEqual({ label: "billing" });
  });

  it("as a judge: 1, or 0 with a reason for [[judge-fail]], ignoring every other directive", async () => {
    const judge = { type: "json" as const, name: JUDGE_OUTPUT_NAME, schema: { type: "object" } };
    const quoted = (item: string) => [user(`Rubric: is it right?\nItem prompt:\n${item}\nAnswer:\n{"label":"billing"}`)];
    expect(JSON.parse((await ask(quoted(`${PROMPT} [[fail]] [[json:1]] [[tool:clock]]`), judge)).text)).toMatchObject({ score: 1 });
    const failed = JSON.parse((await ask(quoted(`${PROMPT} [[judge-fail]] [[429]]`), judge)).text);
    expect(failed.score).toBe(0);
    expect(failed.reason).toMatch(/judge-fail/);
    const started = Date.now();
    await ask(quoted("[[sleep:5000]]"), judge);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it("through the AI SDK: Output.object passes the schema, and the name for a judge", async () => {
    const result = await generateText({
      model: sim,
      prompt: PROMPT,
      output: Output.object({ schema: jsonSchema<{ label: string }>(schema) }),
    });
    expect(result.output).toEqual({ label: "billing" });
    const judged = await generateText({
      model: sim,
      prompt: "grade [[judge-fail]]",
      output: Output.object({ schema: jsonSchema<{ score: number; reason: string }>({ type: "object" }), name: JUDGE_OUTPUT_NAME }),
    });
    expect(judged.output.score).toBe(0);
  });

  it("plain text answers never show the json directives", async () => {
    const { text } = await ask([user(`Hello there [[json:{"a":1}]] [[judge-fail]]`)]);
    expect(text).toMatch(/^Simulated answer to "Hello there"\./);
    expect(stripDirectives('a [[json-once:{"x":"]]"}]] b')).toBe("a   b");
    expect(parseJsonDirective('[[json: {"x": "]]"} ]]')?.value).toBe('{"x": "]]"}');
  });
});

describe("worked examples: the simulator answers an enum field as the most similar example did", () => {
  const SCHEMA = { type: "object", properties: { label: { enum: ["spam", "ham"] }, reason: { type: "string" } }, required: ["label", "reason"] };
  const block = (examples: { input: unknown; answer: unknown }[]) =>
    ["Worked examples: …", "BEGIN EXAMPLES", ...examples.map((e) => JSON.stringify(e)), "END EXAMPLES", "", ""].join("\n");
  const EXAMPLES = [
    { input: { text: "WIN a free cruise now" }, answer: { label: "spam", reason: "a prize" } },
    { input: { text: "Minutes of the budget meeting" }, answer: { label: "ham", reason: "work" } },
  ];
  const answer = (prompt: string) => JSON.parse(jsonAnswer(prompt, { type: "json", schema: SCHEMA }, "", new Set())) as { label: string; reason: string };

  it("takes the label of the example sharing the most words with the item", () => {
    expect(answer(`${block(EXAMPLES)}Is this spam? Agenda for the budget meeting`).label).toBe("ham");
    expect(answer(`${block(EXAMPLES)}Is this spam? A free cruise for you`).label).toBe("spam");
    // Only the enum field: the reason is the simulator's own, drawn from the prompt.
    expect(answer(`${block(EXAMPLES)}Is this spam? Agenda for the budget meeting`).reason).not.toBe("work");
  });
  it("answers as without examples when none shares a word, without a block, or when the example's value is outside the enum", () => {
    expect(answer(`${block(EXAMPLES)}Is this spam? Lunch?`).label).toBe("spam");
    expect(answer("Is this spam? Agenda for the budget meeting").label).toBe("spam");
    expect(answer(`${block([{ input: "the budget meeting", answer: { label: "maybe" } }])}Is this spam? the budget meeting`).label).toBe("spam");
    // A line that is not JSON is skipped.
    expect(answer(`${block(EXAMPLES).replace("BEGIN EXAMPLES\n", "BEGIN EXAMPLES\nnot json\n")}the budget meeting`).label).toBe("ham");
  });
  it("never acts on a directive quoted in an example: another item's text is data", async () => {
    const quoting = block([{ input: { text: 'say [[json:"broken"]] [[fail]] [[429]]' }, answer: { label: "spam", reason: "x" } }]);
    expect(answer(`${quoting}Is this spam? the budget meeting`).label).toBe("spam");
    const reply = await ask([user(`${quoting}Is this spam? the budget meeting`)], { type: "json", schema: SCHEMA });
    expect(JSON.parse(reply.text)).toMatchObject({ label: "spam" });
    // The item's own directive still acts; its [[echo]] answers the prompt as sent, examples and all.
    expect(answer(`${quoting}Is this spam? [[json:{"label":"ham"}]]`)).toEqual({ label: "ham" });
    expect((await ask([user(`${quoting}[[echo]]the budget meeting`)])).text).toBe(`${quoting}the budget meeting`.trim());
    expect((await ask([user(`${block([{ input: "[[echo]] me", answer: "x" }])}the budget meeting`)])).text).not.toContain("BEGIN EXAMPLES");
  });
});
