import Ajv, { type ErrorObject, type Options, type ValidateFunction } from "ajv";
import Ajv2019 from "ajv/dist/2019";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import type { RE2JS } from "re2js";
import { compileCheckPattern, newPatternBudget, type PatternBudget } from "@/lib/check-pattern";
import type { FlotillaConfig } from "@/lib/config";
import { ConfigError } from "../config/load";
import { AppError } from "../errors";
import { nextTurn } from "./next-turn";

/**
 * Output schemas (`output_schema` of a batch or a sub-agent definition, a compatible line's
 * `response_format` schema): compiled with Ajv and cached by their JSON text. Plain Node (the
 * worker loads it). Submission compiles to refuse a bad schema up front; the executor validates
 * every typed answer with the same validator.
 */

// Schema `pattern` / `patternProperties` are user-supplied: match them in linear time (RE2), not
// with the backtracking RegExp engine, each within the pattern budget (lib/check-pattern.ts).
// The walk below has compiled them already; Ajv takes those.
let walked: Map<string, RE2JS> | null = null;
const re2Engine = Object.assign((pattern: string, _flags: string) => walked?.get(pattern) ?? compileCheckPattern(pattern), {
  code: "re2js",
});

const OPTIONS: Options = { strict: false, allErrors: true, code: { regExp: re2Engine } };

type Draft = "07" | "2019" | "2020";

/**
 * Ajv keeps everything it ever compiled (the schema, the generated function, each pattern) in
 * its instance for good, whatever removeSchema drops. So instances live for one generation:
 * after GENERATION_SCHEMAS schemas or GENERATION_INSTRUCTIONS pattern instructions a new one
 * starts, and validators two generations old leave the cache, so at most two generations (and
 * what they hold) stay reachable from here.
 */
const GENERATION_SCHEMAS = 128;
const GENERATION_INSTRUCTIONS = 100_000;

interface Generation {
  id: number;
  schemas: number;
  instructions: number;
  instances: Map<Draft, Ajv>;
}

const newGeneration = (id: number): Generation => ({ id, schemas: 0, instructions: 0, instances: new Map() });
let generation = newGeneration(0);
const cache = new Map<string, { validate: ValidateFunction; generation: number }>();

function ajvFor(schema: object, instructions: number): Ajv {
  if (generation.schemas >= GENERATION_SCHEMAS || generation.instructions + instructions > GENERATION_INSTRUCTIONS) {
    generation = newGeneration(generation.id + 1);
    for (const [key, entry] of cache) if (entry.generation < generation.id - 1) cache.delete(key);
  }
  generation.schemas++;
  generation.instructions += instructions;
  const declared = "$schema" in schema ? String(schema.$schema) : "";
  const draft: Draft = declared.includes("2020-12") ? "2020" : declared.includes("2019-09") ? "2019" : "07";
  let ajv = generation.instances.get(draft);
  if (!ajv) {
    ajv = draft === "2020" ? new Ajv2020(OPTIONS) : draft === "2019" ? new Ajv2019(OPTIONS) : new Ajv(OPTIONS);
    addFormats(ajv);
    generation.instances.set(draft, ajv);
  }
  return ajv;
}

/** A schema refused: `field` is the exact path of what is wrong (a pattern's own path, else the schema's field). */
export class SchemaRefusal extends AppError {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super("validation_failed", `${field}: ${problem}`);
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
 * run there); throws a SchemaRefusal naming the first refused one's path under `field`. Runs
 * before Ajv sees the schema: Ajv compiling an oversized pattern is what took seconds.
 */
function* schemaPatterns(schema: object, field: string, found: Map<string, RE2JS>, budget: PatternBudget): Generator<void> {
  function* check(pattern: string, path: string) {
    if (found.has(pattern)) return;
    try {
      found.set(pattern, compileCheckPattern(pattern, "", budget));
    } catch (err) {
      throw new SchemaRefusal(path, err instanceof Error ? err.message : String(err));
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

/** The schema compiled by Ajv with its patterns compiled already (`found`), and cached. */
function compileWithAjv(schema: object, key: string, field: string, found: Map<string, RE2JS>, instructions: number): ValidateFunction {
  const ajv = ajvFor(schema, instructions);
  let validate: ValidateFunction;
  walked = found;
  try {
    validate = ajv.compile(schema);
  } catch (err) {
    throw new SchemaRefusal(field, err instanceof Error ? err.message : String(err));
  } finally {
    walked = null;
    // A second schema reusing an $id in this generation would be refused otherwise.
    ajv.removeSchema(schema);
  }
  cache.set(key, { validate, generation: generation.id });
  return validate;
}

function asSchemaObject(schema: unknown, field: string): object {
  if (!schema || typeof schema !== "object" || Array.isArray(schema)) throw new SchemaRefusal(field, "must be a JSON Schema object");
  return schema;
}

/**
 * A validator for `schema`; throws a SchemaRefusal (`validation_failed` "<field>: ...") when it
 * does not compile, naming a refused pattern's path under `field`
 * (`output_schema.properties.code.pattern: ...`).
 */
export function compileOutputSchema(schema: unknown, field = "output_schema"): ValidateFunction {
  const key = JSON.stringify(schema);
  const hit = cache.get(key);
  if (hit) return hit.validate;
  const object = asSchemaObject(schema, field);
  const found = new Map<string, RE2JS>();
  const budget = newPatternBudget();
  for (const _ of schemaPatterns(object, field, found, budget));
  return compileWithAjv(object, key, field, found, budget.used);
}

/** compileOutputSchema letting the event loop run between the schema's patterns (a submission's door). */
export async function compileOutputSchemaYielding(schema: unknown, field = "output_schema"): Promise<ValidateFunction> {
  const key = JSON.stringify(schema);
  const hit = cache.get(key);
  if (hit) return hit.validate;
  const object = asSchemaObject(schema, field);
  const found = new Map<string, RE2JS>();
  const budget = newPatternBudget();
  for (const _ of schemaPatterns(object, field, found, budget)) await nextTurn();
  return compileWithAjv(object, key, field, found, budget.used);
}

const MAX_ERRORS = 10;
const MAX_CHARS = 2_000;

function describe(e: ErrorObject): string {
  const path = e.instancePath || "/";
  const p = e.params as Record<string, unknown>;
  let detail = "";
  if (e.keyword === "enum" && Array.isArray(p.allowedValues)) {
    detail = `: ${p.allowedValues.map((v) => JSON.stringify(v)).join(", ")}`;
  } else if (e.keyword === "const") {
    detail = `: ${JSON.stringify(p.allowedValue)}`;
  } else if (e.keyword === "additionalProperties" && typeof p.additionalProperty === "string") {
    detail = ` ("${p.additionalProperty}")`;
  }
  return `${path} ${e.message ?? "is invalid"}${detail}`;
}

/** The last validation's errors as `<instancePath or /> <message>; ...` (first 10, at most 2,000 chars). */
export function schemaErrors(validate: ValidateFunction): string {
  const errors = validate.errors ?? [];
  if (errors.length === 0) return "";
  const parts = errors.slice(0, MAX_ERRORS).map(describe);
  if (errors.length > MAX_ERRORS) parts.push(`and ${errors.length - MAX_ERRORS} more`);
  const text = parts.join("; ");
  return text.length > MAX_CHARS ? `${text.slice(0, MAX_CHARS - 1)}…` : text;
}

/**
 * Start-up check of the configuration's output schemas (each sub-agent definition's), so a
 * schema that does not compile refuses the start naming its field, as an unknown tool group
 * does, instead of failing every run of that sub-agent later.
 */
export function assertConfiguredOutputSchemas(config: FlotillaConfig): void {
  const problems: string[] = [];
  config.subagents.definitions.forEach((d, i) => {
    if (!d.output_schema) return;
    try {
      compileOutputSchema(d.output_schema, `subagents.definitions[${i}].output_schema`);
    } catch (err) {
      problems.push(err instanceof Error ? err.message : String(err));
    }
  });
  if (problems.length) throw new ConfigError(problems);
}
