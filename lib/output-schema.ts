import Ajv, { type Options } from "ajv";
import Ajv2019 from "ajv/dist/2019";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import type { RE2JS } from "re2js";
import { compileCheckPattern, newPatternBudget, type PatternBudget } from "./check-pattern";

/**
 * How an output schema compiles, shared by the server (server/runtime/output-schema.ts, which
 * caches validators) and the New batch dialog (which checks a draft before it is sent): the
 * same Ajv options and draft choice, and the same walk over the schema's patterns under the
 * RE2 pattern budget, so both refuse the same schemas. Pure: no server code.
 */

export type OutputSchemaDraft = "07" | "2019" | "2020";

/** Schema `pattern`s match in linear time (RE2): `regExp` is the engine Ajv compiles them with. */
export function outputSchemaAjvOptions(regExp: (pattern: string, flags: string) => RE2JS): Options {
  return { strict: false, allErrors: true, code: { regExp: Object.assign(regExp, { code: "re2js" }) } };
}

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
const DATA_KEYWORDS = new Set(["const", "enum", "default", "examples"]);
/** Keywords whose value maps names (not keywords) to schemas. */
const SCHEMA_MAPS = new Set(["properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"]);

/** A key as a path segment: `.name`, or `["a b"]` when it is not a plain name. */
const segment = (key: string) => (/^[A-Za-z_$][\w$-]*$|^\d+$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`);

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

// The dialog's checker: an Ajv per draft, kept for a while (making one costs more than a check;
// each keeps what it compiled, so it is replaced after CHECKER_SCHEMAS).
const CHECKER_SCHEMAS = 64;
let checkerPatterns: Map<string, RE2JS> = new Map();
const checkerOptions = outputSchemaAjvOptions((p) => checkerPatterns.get(p) ?? compileCheckPattern(p));
const checkers = new Map<OutputSchemaDraft, { ajv: Ajv; uses: number }>();

function checker(draft: OutputSchemaDraft): Ajv {
  let entry = checkers.get(draft);
  if (!entry || entry.uses >= CHECKER_SCHEMAS) {
    entry = { ajv: newOutputSchemaAjv(draft, checkerOptions), uses: 0 };
    checkers.set(draft, entry);
  }
  entry.uses++;
  return entry.ajv;
}

/**
 * Why `schema` would be refused as an output schema (`{ field, message }`, `field` the path of
 * what is wrong), or null: its patterns under RE2 and the budget, then Ajv compiling it with the
 * server's options. The New batch dialog's check (the server compiles through its own cache).
 */
export function outputSchemaProblem(schema: object, field = "output_schema"): { field: string; message: string } | null {
  const found = new Map<string, RE2JS>();
  try {
    for (const _ of schemaPatterns(schema, field, found, newPatternBudget()));
  } catch (err) {
    if (err instanceof SchemaPatternRefusal) return { field: err.field, message: err.problem };
    throw err;
  }
  const ajv = checker(outputSchemaDraft(schema));
  checkerPatterns = found;
  try {
    // The meta-schema's first complaint reads better than Ajv's joined "schema is invalid: data/…" list.
    if (!ajv.validateSchema(schema)) {
      const first = ajv.errors?.[0];
      if (first) {
        const at = `${field}${first.instancePath.split("/").slice(1).map(segment).join("")}`;
        return { field: at, message: first.message ?? "is not valid" };
      }
    }
    ajv.compile(schema);
    return null;
  } catch (err) {
    return { field, message: err instanceof Error ? err.message : String(err) };
  } finally {
    checkerPatterns = new Map();
    // A later draft reusing this one's $id would be refused otherwise.
    ajv.removeSchema(schema);
  }
}
