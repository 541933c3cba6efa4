import Ajv, { type ErrorObject, type Options, type ValidateFunction } from "ajv";
import Ajv2019 from "ajv/dist/2019";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { compileCheckPattern, newPatternBudget, type PatternBudget } from "@/lib/check-pattern";
import type { FlotillaConfig } from "@/lib/config";
import { ConfigError } from "../config/load";
import { AppError } from "../errors";
import { nextTurn } from "./next-turn";
import { rememberPattern, testPattern } from "./pattern-cache";
import { AJV_OPTIONS, MatchTimeout, VALIDATION_RETRY_LIMIT_MS, validateInThread } from "./pattern-thread";
import { SchemaWorkRefusal, schemaEvaluations } from "./schema-work";

/**
 * Output schemas (`output_schema` of a batch or a sub-agent definition, a compatible line's
 * `response_format` schema): measured (their patterns against the pattern budget, their
 * fan-out against the evaluation budget: schema-work.ts), compiled with Ajv and cached by their
 * JSON text. Plain Node (the worker loads it). Submission compiles to refuse a bad schema up
 * front; a typed answer is validated inline when its work is small, else in the matching thread
 * within its time limit (validateAnswer).
 */

// Schema `pattern` / `patternProperties` are user-supplied: match them in linear time (RE2), not
// with the backtracking RegExp engine, each within the pattern budget (lib/check-pattern.ts), on
// a string's first 1 MiB. A validator holds each pattern as its text: the compiled program lives
// in the process's pattern cache, bounded by size (pattern-cache.ts).
const re2Engine = Object.assign((pattern: string, _flags: string) => ({ test: (s: string) => testPattern(pattern, "", s), toString: () => pattern }), {
  code: "flotilla-re2",
});

const OPTIONS: Options = { ...AJV_OPTIONS, code: { regExp: re2Engine as unknown as NonNullable<Options["code"]>["regExp"] } };

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
/** A compiled output schema and what its work is measured at. */
export interface PreparedSchema {
  validate: ValidateFunction;
  /** The schema's JSON text (its cache key, what the thread compiles). */
  text: string;
  /** The most subschema evaluations one value can receive (schema-work.ts). */
  evaluations: number;
  /** The largest of its patterns' programs (instructions; 0 without patterns). */
  maxProgram: number;
}

const cache = new Map<string, PreparedSchema & { generation: number }>();

const draftOf = (schema: object): Draft => {
  const declared = "$schema" in schema ? String(schema.$schema) : "";
  return declared.includes("2020-12") ? "2020" : declared.includes("2019-09") ? "2019" : "07";
};

/** A fresh Ajv for the schema's draft. */
function newAjv(draft: Draft): Ajv {
  const ajv = draft === "2020" ? new Ajv2020(OPTIONS) : draft === "2019" ? new Ajv2019(OPTIONS) : new Ajv(OPTIONS);
  addFormats(ajv);
  return ajv;
}

function ajvFor(schema: object, instructions: number): Ajv {
  if (generation.schemas >= GENERATION_SCHEMAS || generation.instructions + instructions > GENERATION_INSTRUCTIONS) {
    generation = newGeneration(generation.id + 1);
    for (const [key, entry] of cache) if (entry.generation < generation.id - 1) cache.delete(key);
  }
  generation.schemas++;
  generation.instructions += instructions;
  const draft = draftOf(schema);
  let ajv = generation.instances.get(draft);
  if (!ajv) {
    ajv = newAjv(draft);
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
 * A `format` (ajv-formats) is matched with JavaScript's backtracking RegExp: it counts as a
 * pattern this large when validateAnswer weighs an answer, so a long one is checked in the
 * thread, within the time limit.
 */
const FORMAT_PROGRAM = 200;
/** `uniqueItems` compares items pairwise (quadratic in an array's length): only a short answer is checked inline. */
const UNIQUE_ITEMS_PROGRAM = 1_000;

/** What the walk over a schema's patterns found: their total and largest program. */
interface Walked {
  budget: PatternBudget;
  maxProgram: number;
  /** Keep each compiled pattern in the pattern cache (a schema about to be used). */
  remember: boolean;
}

/**
 * Compiles every pattern of the schema (`pattern` and `patternProperties` keys, at any depth)
 * under the pattern budget (each goes into the pattern cache for its first match), pausing after
 * each (a caller may let the event loop run there); throws a SchemaRefusal naming the first
 * refused one's path under `field`. Runs before Ajv sees the schema: Ajv compiling an oversized
 * pattern is what took seconds.
 */
function* schemaPatterns(schema: object, field: string, walked: Walked): Generator<void> {
  const seen = new Set<string>();
  function* check(pattern: string, path: string) {
    if (seen.has(pattern)) return;
    seen.add(pattern);
    try {
      const before = walked.budget.used;
      const re = compileCheckPattern(pattern, "", walked.budget);
      walked.maxProgram = Math.max(walked.maxProgram, walked.budget.used - before);
      if (walked.remember) rememberPattern(pattern, "", re);
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
      else if (key === "format" && typeof value === "string") walked.maxProgram = Math.max(walked.maxProgram, FORMAT_PROGRAM);
      else if (key === "uniqueItems" && value === true) walked.maxProgram = Math.max(walked.maxProgram, UNIQUE_ITEMS_PROGRAM);
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

/** The schema's fan-out measured (schema-work.ts): refused naming `field` past the budget. */
function evaluationsOf(schema: object, field: string): number {
  try {
    return schemaEvaluations(schema);
  } catch (err) {
    if (err instanceof SchemaWorkRefusal) throw new SchemaRefusal(field, err.message);
    throw err;
  }
}

/** `schema` compiled by `ajv` (refusals name `field`), its `$id` left free for the next one. */
function compileWith(ajv: Ajv, schema: object, field: string): ValidateFunction {
  try {
    return ajv.compile(schema);
  } catch (err) {
    throw new SchemaRefusal(field, err instanceof Error ? err.message : String(err));
  } finally {
    // A second schema reusing an $id in this Ajv would be refused otherwise.
    ajv.removeSchema(schema);
  }
}

function asSchemaObject(schema: unknown, field: string): object {
  if (!schema || typeof schema !== "object" || Array.isArray(schema)) throw new SchemaRefusal(field, "must be a JSON Schema object");
  return schema;
}

/** The schema measured, its patterns walked (`pause` between them), compiled and cached. */
function* prepare(schema: unknown, field: string): Generator<void, PreparedSchema> {
  const text = JSON.stringify(schema);
  const hit = cache.get(text);
  if (hit) return hit;
  const object = asSchemaObject(schema, field);
  const walked: Walked = { budget: newPatternBudget(), maxProgram: 0, remember: true };
  yield* schemaPatterns(object, field, walked);
  const evaluations = evaluationsOf(object, field);
  const validate = compileWith(ajvFor(object, walked.budget.used), object, field);
  const prepared = { validate, text, evaluations, maxProgram: walked.maxProgram };
  cache.set(text, { ...prepared, generation: generation.id });
  return prepared;
}

function run<T>(steps: Generator<void, T>): T {
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/**
 * A schema compiled and measured; throws a SchemaRefusal (`validation_failed` "<field>: ...")
 * when it is refused: it does not compile, a pattern is over the pattern budget (its path under
 * `field`: `output_schema.properties.code.pattern: ...`), or its fan-out is over the evaluation
 * budget.
 */
export function prepareOutputSchema(schema: unknown, field = "output_schema"): PreparedSchema {
  return run(prepare(schema, field));
}

/** prepareOutputSchema's validator. */
export function compileOutputSchema(schema: unknown, field = "output_schema"): ValidateFunction {
  return prepareOutputSchema(schema, field).validate;
}

/** compileOutputSchema letting the event loop run between the schema's patterns (a submission's door). */
export async function compileOutputSchemaYielding(schema: unknown, field = "output_schema"): Promise<ValidateFunction> {
  const steps = prepare(schema, field);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value.validate;
    await nextTurn();
  }
}

/**
 * Checks schemas without keeping them compiled: each is measured and compiled as
 * prepareOutputSchema does, by an Ajv of the checker's own that goes when the checker does (a
 * compatible batch file's schemas are checked once each, then let go). Answers the schema's
 * pattern instructions.
 */
export function schemaChecker(): (schema: unknown, field: string) => { instructions: number } {
  const instances = new Map<Draft, Ajv>();
  return (schema, field) => {
    const object = asSchemaObject(schema, field);
    const walked: Walked = { budget: newPatternBudget(), maxProgram: 0, remember: false };
    run(schemaPatterns(object, field, walked));
    evaluationsOf(object, field);
    const draft = draftOf(object);
    const ajv = instances.get(draft) ?? newAjv(draft);
    instances.set(draft, ajv);
    compileWith(ajv, object, field);
    return { instructions: walked.budget.used };
  };
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

/** Errors as `<instancePath or /> <message>; ...` (the first 10 of `count`, at most 2,000 chars). */
function errorsText(errors: readonly ErrorObject[], count: number): string {
  if (count === 0) return "";
  const parts = errors.slice(0, MAX_ERRORS).map(describe);
  if (count > MAX_ERRORS) parts.push(`and ${count - MAX_ERRORS} more`);
  const text = parts.join("; ");
  return text.length > MAX_CHARS ? `${text.slice(0, MAX_CHARS - 1)}…` : text;
}

/** The last validation's errors as `<instancePath or /> <message>; ...` (first 10, at most 2,000 chars). */
export function schemaErrors(validate: ValidateFunction): string {
  const errors = validate.errors ?? [];
  return errorsText(errors, errors.length);
}

/**
 * Subschema evaluations × answer characters × (largest pattern program + what a keyword costs)
 * validated inline; more goes to the matching thread. About 20 ms at most.
 */
const INLINE_WORK = 1_000_000;
const KEYWORD_WORK = 10;

/**
 * `timedOut`: the schema took longer than the time limit on this answer (a verdict on the
 * answer's size, not on its content: no repair turn can make it cheaper to check).
 */
export type AnswerValidation = { ok: true } | { ok: false; errors: string; timedOut?: boolean };

/**
 * A parsed answer (`value`, from the JSON text `json`) against a prepared schema: inline when its
 * work is small, else in the matching thread within MATCH_TIME_LIMIT_MS, compiling included
 * (server/runtime/pattern-thread.ts); one that times out there is checked once more within
 * VALIDATION_RETRY_LIMIT_MS (a large answer on a loaded machine is not refused for the load).
 * `label` names the schema in a timeout's reason.
 */
export async function validateAnswer(schema: PreparedSchema, json: string, value: unknown, label = "output_schema"): Promise<AnswerValidation> {
  if (schema.evaluations * json.length * (schema.maxProgram + KEYWORD_WORK) <= INLINE_WORK) {
    if (schema.validate(value)) return { ok: true };
    return { ok: false, errors: schemaErrors(schema.validate) };
  }
  try {
    const checked = await validateInThread(schema.text, json, MAX_ERRORS).catch((err) => {
      if (!(err instanceof MatchTimeout)) throw err;
      return validateInThread(schema.text, json, MAX_ERRORS, VALIDATION_RETRY_LIMIT_MS);
    });
    return checked.valid ? { ok: true } : { ok: false, errors: errorsText(checked.errors, checked.count) };
  } catch (err) {
    if (err instanceof MatchTimeout)
      return { ok: false, errors: `${label} validation took longer than ${VALIDATION_RETRY_LIMIT_MS / 1000} s`, timedOut: true };
    return { ok: false, errors: `/ could not be checked against the schema (${err instanceof Error ? err.message : "error"})` };
  }
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
