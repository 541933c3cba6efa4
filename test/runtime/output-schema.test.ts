import { describe, expect, it } from "vitest";
import { AppError } from "@/server/errors";
import { ConfigError, loadConfig } from "@/server/config/load";
import { assertConfiguredOutputSchemas, compileOutputSchema, SchemaRefusal, schemaErrors } from "@/server/runtime/output-schema";

function compileError(schema: unknown): AppError {
  try {
    compileOutputSchema(schema);
  } catch (err) {
    if (err instanceof AppError) return err;
    throw err;
  }
  throw new Error("compiled");
}

describe("compileOutputSchema", () => {
  it("validates against a draft-07 schema with formats, and names each error's path", () => {
    const validate = compileOutputSchema({
      type: "object",
      properties: {
        label: { enum: ["spam", "ham"] },
        score: { type: "integer", minimum: 0 },
        email: { type: "string", format: "email" },
      },
      required: ["label", "score"],
      additionalProperties: false,
    });
    expect(validate({ label: "spam", score: 3, email: "a@example.com" })).toBe(true);
    expect(validate({ label: "eggs", score: -1, email: "nope", extra: 1 })).toBe(false);
    const text = schemaErrors(validate);
    expect(text).toContain('/label must be equal to one of the allowed values: "spam", "ham"');
    expect(text).toContain("/score must be >= 0");
    expect(text).toContain('/email must match format "email"');
    expect(text).toContain('/ must NOT have additional properties ("extra")');
    expect(validate({ score: 1 })).toBe(false);
    expect(schemaErrors(validate)).toBe("/ must have required property 'label'");
  });

  it("accepts any top-level type and draft 2020-12 when $schema says so", () => {
    const draft2020 = compileOutputSchema({
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "array",
      prefixItems: [{ type: "string" }, { type: "number" }],
      items: false,
    });
    expect(draft2020(["a", 1])).toBe(true);
    expect(draft2020(["a", 1, 2])).toBe(false);
    expect(draft2020([1])).toBe(false);
    expect(schemaErrors(draft2020)).toContain("/0 must be string");
    const str = compileOutputSchema({ type: "string", maxLength: 3 });
    expect(str("abc")).toBe(true);
    expect(str("abcd")).toBe(false);
  });

  it("caches by JSON text and tolerates two schemas with one $id", () => {
    const a = compileOutputSchema({ $id: "https://x.test/s", type: "string" });
    expect(compileOutputSchema({ $id: "https://x.test/s", type: "string" })).toBe(a);
    const b = compileOutputSchema({ $id: "https://x.test/s", type: "number" });
    expect(b(1)).toBe(true);
    expect(a(1)).toBe(false);
  });

  it("resolves $ref to $defs and definitions", () => {
    const v = compileOutputSchema({
      type: "object",
      properties: { a: { $ref: "#/$defs/n" }, b: { $ref: "#/definitions/s" } },
      $defs: { n: { type: "number" } },
      definitions: { s: { type: "string" } },
    });
    expect(v({ a: 1, b: "x" })).toBe(true);
    expect(v({ a: "1", b: 2 })).toBe(false);
    expect(schemaErrors(v)).toBe("/a must be number; /b must be string");
  });

  it("refuses a schema that does not compile with validation_failed naming output_schema", () => {
    for (const [schema, message] of [
      [{ type: "nope" }, "output_schema: schema is invalid: data/type must be equal to one of the allowed values"],
      [{ $ref: "#/$defs/missing" }, "output_schema: can't resolve reference #/$defs/missing"],
      [{ type: "string", pattern: "(?=a)b" }, "output_schema.pattern: does not compile (RE2 syntax): error parsing regexp"],
      [["not", "an", "object"], "output_schema: must be a JSON Schema object"],
      [{ $schema: "http://json-schema.org/draft-04/schema#" }, "output_schema: no schema with key or ref"],
    ] as const) {
      const err = compileError(schema);
      expect(err.code).toBe("validation_failed");
      expect(err.message.startsWith(message), err.message).toBe(true);
    }
  });

  it("matches schema patterns in linear time (a catastrophic backtracking pattern stays fast)", () => {
    const v = compileOutputSchema({ type: "string", pattern: "^(a+)+$" });
    const start = performance.now();
    expect(v(`${"a".repeat(5_000)}b`)).toBe(false);
    expect(v("a".repeat(5_000))).toBe(true);
    expect(performance.now() - start).toBeLessThan(1_000);
  });

  it("refuses a pattern over the budget naming its path, with the path as the refusal's field", () => {
    const err = compileError({ type: "object", properties: { "a b": { type: "array", items: [{ pattern: "x{101}" }] } } });
    expect(err).toBeInstanceOf(SchemaRefusal);
    expect((err as SchemaRefusal).field).toBe('output_schema.properties["a b"].items.0.pattern');
    expect(err.message).toBe('output_schema.properties["a b"].items.0.pattern: counted repetition {101} is above the limit of 100');
    // The schema's patterns together: each under the budget, too many for one schema.
    const words = Array.from({ length: 245 }, (_, i) => `${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26))}q`);
    const properties = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`p${i}`, { type: "string", pattern: `(?:${words.join("|")}){4}${i}` }]));
    expect(compileError({ type: "object", properties }).message).toMatch(/^output_schema\.properties\.p5\.pattern: with the patterns before it, expands to more than 20000/);
  });

  it("compiles through fresh Ajv generations: old validators keep working, the cache lets go of them", () => {
    const schema = (i: number) => ({
      $id: "https://x.test/reused",
      type: "object",
      properties: { [`f${i}`]: { type: "string", pattern: `^x${i}$` } },
      required: [`f${i}`],
    });
    const validators = Array.from({ length: 600 }, (_, i) => compileOutputSchema(schema(i)));
    validators.forEach((v, i) => {
      expect(v({ [`f${i}`]: `x${i}` })).toBe(true);
      expect(v({ [`f${i}`]: `y${i}` })).toBe(false);
    });
    // Recent ones are cached; the first, several generations back, is compiled anew.
    expect(compileOutputSchema(schema(599))).toBe(validators[599]);
    expect(compileOutputSchema(schema(0))).not.toBe(validators[0]);
  });

  it("bounds the error text: first 10 errors, at most 2,000 characters", () => {
    const properties = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`field_${i}`, { type: "string" }]));
    const v = compileOutputSchema({ type: "object", properties });
    expect(v(Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`field_${i}`, i])))).toBe(false);
    const text = schemaErrors(v);
    expect(text.split("; ")).toHaveLength(11);
    expect(text.endsWith("and 20 more")).toBe(true);
    const long = compileOutputSchema({ type: "object", properties: { x: { const: "y".repeat(5_000) } } });
    expect(long({ x: "z" })).toBe(false);
    expect(schemaErrors(long).length).toBeLessThanOrEqual(2_000);
  });
});

describe("assertConfiguredOutputSchemas", () => {
  const withSchema = (output_schema: unknown) =>
    loadConfig({
      env: {
        FLOTILLA__SUBAGENTS__DEFINITIONS: JSON.stringify([
          { name: "plain", description: "d", system_prompt: "s" },
          { name: "typed", description: "d", system_prompt: "s", output_schema },
        ]),
      },
      cwd: "/nonexistent",
    });

  it("refuses the start naming the definition's field when its schema does not compile", () => {
    const config = withSchema({ type: "object", properties: { a: { $ref: "#/$defs/missing" } } });
    expect(() => assertConfiguredOutputSchemas(config)).toThrowError(ConfigError);
    expect(() => assertConfiguredOutputSchemas(config)).toThrowError(/subagents\.definitions\[1\]\.output_schema: .*missing/);
  });

  it("names a refused pattern's own path under the definition", () => {
    const config = withSchema({ type: "object", properties: { code: { type: "string", pattern: "^a{1000}$" } } });
    expect(() => assertConfiguredOutputSchemas(config)).toThrowError(
      "subagents.definitions[1].output_schema.properties.code.pattern: counted repetition {1000} is above the limit of 100",
    );
  });

  it("accepts definitions whose schemas compile", () => {
    expect(() => assertConfiguredOutputSchemas(withSchema({ type: "object", properties: { a: { type: "string" } } }))).not.toThrow();
  });
});
