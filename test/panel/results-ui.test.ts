import { describe, expect, it } from "vitest";
import { appendPage, chainItems, firstPageChain } from "@/components/batches/item-pages";
import { draftPrompt, parseItemsInput } from "@/components/batches/new-batch/items-input";
import { buildSubmission } from "@/components/batches/new-batch/submission";
import { readFileSync } from "node:fs";
import path from "node:path";
import { metaSchemaSources } from "@/lib/output-schema-meta-source";
import { typedCompileProblems } from "@/components/batches/new-batch/typed-compile";
import { parseChecksText, parseOutputSchemaText, relabelServerMessage } from "@/components/batches/new-batch/typed-input";
import { pilotValue } from "@/components/batches/new-batch/cost";
import { compileOutputSchema } from "@/server/runtime/output-schema";
import type { ItemProjection } from "@/lib/api/batches";
import { submitBatchSchema } from "@/lib/api/batches";
import { cellText, inputFields, itemDurationMs, outputField, resultColumns } from "@/lib/result-columns";

/** The pure parts of the Results table and the New batch dialog's typed fields (e2e/results.spec.ts drives the real thing). */

const LIMITS = { maxItems: 5000, maxLiveItems: 1000, maxRunningItems: 64 };

describe("result columns", () => {
  it("names output columns after their property, output.-prefixed when an input field has the name", () => {
    const cols = resultColumns({ input_fields: ["text", "label"], output_fields: ["label", "score"], checks: [{ name: "a" }, { name: "b" }] });
    expect(cols.input).toEqual(["text", "label"]);
    expect(cols.output).toEqual([
      { field: "label", header: "output.label" },
      { field: "score", header: "score" },
    ]);
    expect(cols.checks).toEqual(["a", "b"]);
    expect(resultColumns({ input_fields: [], output_fields: [], checks: [] })).toEqual({ input: [], output: [], checks: [] });
  });

  it("prints cells: strings as they are, nothing as empty, nested values as compact JSON", () => {
    expect(cellText("a, \"b\"")).toBe('a, "b"');
    expect(cellText(null)).toBe("");
    expect(cellText(undefined)).toBe("");
    expect(cellText(0)).toBe("0");
    expect(cellText(false)).toBe("false");
    expect(cellText({ a: [1, "x"] })).toBe('{"a":[1,"x"]}');
  });

  it("reads an object item's fields back from its input, and gives up on a cut one", () => {
    expect(inputFields('{"text":"hi","n":2}')).toEqual({ text: "hi", n: 2 });
    expect(inputFields('{"text":"a long text cut he')).toBeNull();
    expect(inputFields("plain string item")).toBeNull();
    expect(inputFields("[1,2]")).toBeNull();
  });

  it("reads an output column only from an object's own property", () => {
    expect(outputField({ label: "x" }, "label")).toBe("x");
    expect(outputField({ label: "x" }, "toString")).toBeUndefined();
    expect(outputField("text", "label")).toBeUndefined();
    expect(outputField(null, "label")).toBeUndefined();
    expect(outputField([1], "0")).toBeUndefined();
  });

  it("times an item from start to finish", () => {
    expect(itemDurationMs({ started_at: "2026-01-01T00:00:00.000Z", finished_at: "2026-01-01T00:00:01.500Z" })).toBe(1500);
    expect(itemDurationMs({ started_at: "2026-01-01T00:00:00.000Z", finished_at: null })).toBeNull();
    expect(itemDurationMs({ started_at: "bad", finished_at: "2026-01-01T00:00:00.000Z" })).toBeNull();
  });
});

describe("bounded pages", () => {
  const item = (n: number) => ({ id: `i${n}`, position: n }) as ItemProjection;
  const page = (ns: number[], next: string | null) => ({ items: ns.map(item), next_cursor: next });

  it("drops the oldest pages past the bound and counts their rows", () => {
    let c = firstPageChain(page([1, 2], "c2"));
    c = appendPage(c, "c2", page([3, 4], "c4"), 2);
    expect(c.dropped).toBe(0);
    c = appendPage(c, "c4", page([5, 6], "c6"), 2);
    expect(c.pages.map((p) => p.cursor)).toEqual(["c2", "c4"]);
    expect(chainItems(c).map((i) => i.position)).toEqual([3, 4, 5, 6]);
    expect(c.dropped).toBe(2);
    c = appendPage(c, "c6", page([7], null), 2);
    expect(chainItems(c).map((i) => i.position)).toEqual([5, 6, 7]);
    expect(c.dropped).toBe(4);
    expect(c.nextCursor).toBeNull();
  });
});

describe("CSV of fields", () => {
  const csv = 'item_key,text,lang,expected\nk1,"Great, fast",en,"{""label"":""positive""}"\nk2,"two\nlines",fr,negative\nk3,x,en,\n';

  it("maps the header to fields, item_key to the key and expected (JSON or text) to expected", () => {
    const r = parseItemsInput(csv, "csv");
    expect(r.errors).toEqual([]);
    expect(r.fields).toEqual(["text", "lang"]);
    expect(r.expected).toBe(true);
    expect(r.items).toEqual([
      { kind: "object", fields: { text: "Great, fast", lang: "en" }, expected: { label: "positive" }, key: "k1" },
      { kind: "object", fields: { text: "two\nlines", lang: "fr" }, expected: "negative", key: "k2" },
      { kind: "object", fields: { text: "x", lang: "en" }, key: "k3" },
    ]);
    expect(draftPrompt(r.items[0], "[{{lang}}] {{text}}")).toBe("[en] Great, fast");
  });

  it("names bad rows by the physical line they start on, and a bad header", () => {
    const r = parseItemsInput('a,b\n"x\ny",1\nshort\n', "csv");
    expect(r.errors).toEqual(["line 4: 1 field where the header has 2"]);
    expect(parseItemsInput('a,b\r"x\ry",1\rshort\r', "csv").errors).toEqual(["line 4: 1 field where the header has 2"]);
    expect(parseItemsInput("a,a\n1,2\n", "csv").errors).toEqual(['line 1: the column "a" appears twice']);
    expect(parseItemsInput("a,\n1,2\n", "csv").errors).toEqual(["line 1: column 2 has no name"]);
    expect(parseItemsInput("item_key,expected\nk,1\n", "csv").errors).toEqual([
      "line 1: the header names no field besides item_key and expected",
    ]);
    const wide = `${Array.from({ length: 65 }, (_, i) => `f${i}`).join(",")}\n`;
    expect(parseItemsInput(wide, "csv").errors).toEqual(["line 1: 65 fields; an item has at most 64"]);
  });

  it("sends object items with the template, and checks the template names only its fields", () => {
    const r = parseItemsInput(csv, "csv");
    const base = { submissionKey: "k", template: "{{lang}}: {{text}}", items: r.items, fields: r.fields };
    const built = buildSubmission(base, LIMITS);
    expect(built.error).toBeNull();
    expect(built.body?.items[0]).toEqual({ item_key: "k1", text: "Great, fast", lang: "en", expected: { label: "positive" } });
    expect(built.body?.prompt_template).toBe("{{lang}}: {{text}}");
    expect(submitBatchSchema.safeParse(built.body).success).toBe(true);
    expect(buildSubmission({ ...base, template: "{{item}}" }, LIMITS).error).toBe(
      "The prompt template names {{item}}, which is not a field of the items (their fields: {{text}}, {{lang}}).",
    );
    expect(buildSubmission({ ...base, template: "Classify" }, LIMITS).error).toBe(
      "The prompt template must contain a field, such as {{text}}.",
    );
  });

  it("carries the output schema and checks into the body", () => {
    const schema = parseOutputSchemaText('{"type":"object","properties":{"label":{"type":"string"}}}');
    const checks = parseChecksText('[{"name":"m","type":"equals","path":"/label"}]');
    const built = buildSubmission({ submissionKey: "k", template: "{{item}}", items: [{ kind: "value", value: "a" }], outputSchema: schema.value, checks: checks.value }, LIMITS);
    expect(built.body).toMatchObject({ output_schema: { type: "object" }, checks: [{ name: "m", type: "equals", path: "/label" }] });
    expect(submitBatchSchema.safeParse(built.body).success).toBe(true);
  });
});

describe("JSONL of fields", () => {
  it("reads objects of fields with the rules every door applies, naming the line of a bad one", () => {
    const r = parseItemsInput('{"item_key":"a","text":"hi","n":2,"expected":{"label":"x"}}\n{"text":"yo","flag":true}\n{"item":"plain"}\n', "jsonl");
    expect(r.errors).toEqual([]);
    expect(r.fields).toEqual(["text", "n", "flag"]);
    expect(r.expected).toBe(true);
    expect(r.items).toEqual([
      { kind: "object", fields: { text: "hi", n: 2 }, expected: { label: "x" }, key: "a" },
      { kind: "object", fields: { text: "yo", flag: true }, key: undefined },
      { kind: "value", value: "plain", key: undefined },
    ]);
    const bad = parseItemsInput('{"text":"ok"}\n{"text":{"nested":1}}\n{"item_key":"k"}\n', "jsonl");
    expect(bad.errors).toEqual([
      "line 2: text: must be a string, a number or a boolean",
      "line 3: an object item needs at least one field besides item_key and expected (or a prompt)",
    ]);
  });
});

describe("output schema and checks text", () => {
  it("sends nothing for an empty field", () => {
    expect(parseOutputSchemaText("  ")).toEqual({ value: undefined, error: null });
    expect(parseChecksText("")).toEqual({ value: undefined, error: null });
  });

  it("names what is wrong by the field's label: Output schema, Checks, Check N <field>", () => {
    expect(parseOutputSchemaText('{"type":').error).toMatch(/^Output schema: not valid JSON \(/);
    expect(parseOutputSchemaText("[1]").error).toBe("Output schema: must be a JSON Schema object");
    expect(parseOutputSchemaText(JSON.stringify({ description: "x".repeat(17_000) })).error).toBe(
      "Output schema: must be at most 16384 bytes as JSON",
    );
    expect(parseChecksText('{"name":"a"}').error).toBe("Checks: must be an array of checks");
    expect(parseChecksText('[{"name":"a","type":"equals"}]').error).toMatch(/^Check 1 path: /);
    expect(parseChecksText('[{"name":"a","type":"nope"}]').error).toMatch(/^Check 1( type)?: /);
    expect(parseChecksText('[{"name":"a","type":"regex","pattern":"x"},{"name":"a","type":"regex","pattern":"y"}]').error).toBe(
      'Check 2 name: duplicate check name "a"',
    );
  });

  it("checks schemas with the meta-schema validators generated from this ajv (no eval in the browser)", () => {
    for (const { file, code } of metaSchemaSources())
      expect(readFileSync(path.join("lib/output-schema-meta", file), "utf8"), `${file}: run npx tsx scripts/output-schema-meta.ts`).toBe(code);
  });

  it("compiles a well-formed schema and the regex checks as the server does, naming the field", () => {
    const ok = typedCompileProblems({ type: "object", properties: { code: { type: "string", pattern: "^[A-Z]{3}$" } } }, [
      { name: "a", type: "regex", pattern: "^ok" },
      { name: "b", type: "equals", path: "/code" },
    ]);
    expect(ok).toEqual({ schemaError: null, checksError: null });
    expect(typedCompileProblems({ type: "nope" }, undefined).schemaError).toBe(
      "Output schema type: must be equal to one of the allowed values",
    );
    expect(typedCompileProblems({ $ref: "#/$defs/missing" }, undefined).schemaError).toMatch(
      /^Output schema: can't resolve reference #\/\$defs\/missing/,
    );
    expect(typedCompileProblems({ $schema: "http://json-schema.org/draft-04/schema#" }, undefined).schemaError).toMatch(
      /^Output schema: no schema with key or ref/,
    );
    // A 2020-12 schema is read as 2020-12 ($defs with prefixItems), as the server reads it.
    expect(
      typedCompileProblems({ $schema: "https://json-schema.org/draft/2020-12/schema", type: "array", prefixItems: [{ type: "string" }] }, undefined)
        .schemaError,
    ).toBeNull();
    // RE2 semantics, not RegExp: lookahead compiles in JavaScript and is refused here, as by the server.
    expect(typedCompileProblems({ type: "string", pattern: "(?=a)b" }, undefined).schemaError).toMatch(
      /^Output schema pattern: does not compile \(RE2 syntax\)/,
    );
    expect(typedCompileProblems({ properties: { code: { pattern: "x{101}" } } }, undefined).schemaError).toBe(
      "Output schema properties.code.pattern: counted repetition {101} is above the limit of 100",
    );
    const checks = [
      { name: "a", type: "regex" as const, pattern: "^ok" },
      { name: "b", type: "regex" as const, pattern: "(a" },
    ];
    expect(typedCompileProblems(undefined, checks).checksError).toMatch(/^Check 2 pattern: does not compile \(RE2 syntax\): .*missing closing \)/);
    expect(typedCompileProblems(undefined, [{ name: "a", type: "regex", pattern: "(\\w)\\1" }]).checksError).toMatch(
      /^Check 1 pattern: does not compile \(RE2 syntax\)/,
    );
  });

  it("refuses what the server's submission refuses, and takes what it takes", () => {
    const schemas = [
      { type: "nope" },
      { $ref: "#/x" },
      { $ref: "#/$defs/a~1b", $defs: { "a/b": { type: "string" } } },
      { $comment: 5 },
      { type: "object", required: "label" },
      { $schema: "http://json-schema.org/draft-07/schema#", type: "string" },
      { $schema: "https://json-schema.org/draft/2019-09/schema", type: "string", minLength: -1 },
      { $schema: "http://json-schema.org/draft-04/schema#" },
      { type: "string", pattern: "(?<=a)b" },
      { type: "string", pattern: "^[a-z]+$", format: "email" },
      { enum: [{ pattern: "(?=x)" }] },
    ];
    for (const schema of schemas) {
      const browser = typedCompileProblems(schema, undefined).schemaError;
      let server: string | null = null;
      try {
        compileOutputSchema(schema);
      } catch (err) {
        server = (err as Error).message;
      }
      expect(browser === null, `${JSON.stringify(schema)}: ${browser} / ${server}`).toBe(server === null);
    }
  });
});

describe("pilot and the estimate's refusals", () => {
  it("sends a pilot only when asked, as a whole number from 1 to the maximum", () => {
    const draft = { pilotOn: false, pilot: "10", lane: "live" as const };
    expect(pilotValue(draft, 1000)).toEqual({ value: undefined, error: null });
    expect(pilotValue({ ...draft, pilotOn: true }, 1000)).toEqual({ value: 10, error: null });
    for (const bad of ["0", "1001", "2.5", "", "x"])
      expect(pilotValue({ ...draft, pilotOn: true, pilot: bad }, 1000).error).toBe("Pilot items must be a whole number from 1 to 1000.");
  });

  it("names a server refusal's field as the dialog labels it", () => {
    expect(relabelServerMessage('checks.1.model: unknown model "nope" (not in the model catalog)')).toBe(
      'Check 2 model: unknown model "nope" (not in the model catalog)',
    );
    expect(relabelServerMessage("output_schema: too many evaluations")).toBe("Output schema: too many evaluations");
    expect(relabelServerMessage("prompt_template: must not be empty")).toBe("prompt_template: must not be empty");
  });
});
