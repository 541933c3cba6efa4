import type { RE2JS } from "re2js";
import { compileCheckPattern, type PatternBudget } from "./check-pattern";

/**
 * What the New batch dialog's check (lib/output-schema-check.ts) reads an output schema by, as
 * server/runtime/output-schema.ts does: the draft its `$schema` picks, and the walk over its
 * patterns under the RE2 pattern budget with the refused one's path. Pure: no server code.
 */

export type OutputSchemaDraft = "07" | "2019" | "2020";

/** Each draft's meta-schema id: a schema's `$schema` must name its draft's (a trailing "#" aside). */
export const OUTPUT_SCHEMA_META_IDS: Record<OutputSchemaDraft, string> = {
  "07": "http://json-schema.org/draft-07/schema",
  "2019": "https://json-schema.org/draft/2019-09/schema",
  "2020": "https://json-schema.org/draft/2020-12/schema",
};

/** The draft a schema declares in `$schema` (2020-12, 2019-09), else draft-07. */
export function outputSchemaDraft(schema: object): OutputSchemaDraft {
  const declared = "$schema" in schema ? String(schema.$schema) : "";
  return declared.includes("2020-12") ? "2020" : declared.includes("2019-09") ? "2019" : "07";
}

/** A schema's pattern refused: `field` is its exact path (`output_schema.properties.code.pattern`). */
export class SchemaPatternRefusal extends Error {
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(`${field}: ${problem}`);
  }
}

/** Keywords whose value is data, not schemas: a `pattern` key inside one is not a pattern. */
export const DATA_KEYWORDS = new Set(["const", "enum", "default", "examples"]);
/** Keywords whose value maps names (not keywords) to schemas. */
const SCHEMA_MAPS = new Set(["properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"]);

/** A key as a path segment: `.name`, or `["a b"]` when it is not a plain name. */
export const segment = (key: string) => (/^[A-Za-z_$][\w$-]*$|^\d+$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`);

/**
 * Compiles every pattern of the schema (`pattern` and `patternProperties` keys, at any depth)
 * under the pattern budget into `found`, pausing after each (a caller may let the event loop
 * run there); throws a SchemaPatternRefusal naming the first refused one's path under `field`.
 * Runs before Ajv sees the schema: Ajv compiling an oversized pattern is what took seconds.
 */
export function* schemaPatterns(schema: object, field: string, found: Map<string, RE2JS>, budget: PatternBudget): Generator<void> {
  function* check(pattern: string, path: string) {
    if (found.has(pattern)) return;
    try {
      found.set(pattern, compileCheckPattern(pattern, "", budget));
    } catch (err) {
      throw new SchemaPatternRefusal(path, err instanceof Error ? err.message : String(err));
    }
    yield;
  }
  function* walk(node: unknown, path: string): Generator<void> {
    if (Array.isArray(node)) {
      for (const [i, item] of node.entries()) yield* walk(item, `${path}.${i}`);
      return;
    }
    if (!node || typeof node !== "object") return;
    for (const [key, value] of Object.entries(node)) {
      const at = `${path}${segment(key)}`;
      if (DATA_KEYWORDS.has(key)) continue;
      if (key === "pattern" && typeof value === "string") yield* check(value, at);
      else if (SCHEMA_MAPS.has(key) && value && typeof value === "object" && !Array.isArray(value)) {
        for (const [name, sub] of Object.entries(value)) {
          if (key === "patternProperties") yield* check(name, `${at}${segment(name)}`);
          yield* walk(sub, `${at}${segment(name)}`);
        }
      } else yield* walk(value, at);
    }
  }
  yield* walk(schema, field);
}
