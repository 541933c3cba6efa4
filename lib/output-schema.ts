import Ajv, { type Options } from "ajv";
import Ajv2019 from "ajv/dist/2019";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import type { RE2JS } from "re2js";
import { compileCheckPattern, type PatternBudget } from "./check-pattern";

/**
 * How an output schema compiles, shared by the server (server/runtime/output-schema.ts, which
 * caches validators) and the New batch dialog's check (lib/output-schema-check.ts): the same
 * Ajv options and draft choice, and the same walk over the schema's patterns under the RE2
 * pattern budget, so both refuse the same schemas. Pure: no server code.
 */

export type OutputSchemaDraft = "07" | "2019" | "2020";

/** Schema `pattern`s match in linear time (RE2): `regExp` is the engine Ajv compiles them with. */
export function outputSchemaAjvOptions(regExp: (pattern: string, flags: string) => RE2JS): Options {
  return { strict: false, allErrors: true, code: { regExp: Object.assign(regExp, { code: "re2js" }) } };
}

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

/** An Ajv instance for `draft` with the output schemas' options and formats. */
export function newOutputSchemaAjv(draft: OutputSchemaDraft, options: Options): Ajv {
  const ajv = draft === "2020" ? new Ajv2020(options) : draft === "2019" ? new Ajv2019(options) : new Ajv(options);
  addFormats(ajv);
  return ajv;
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
