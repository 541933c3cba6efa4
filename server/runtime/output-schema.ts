import Ajv, { type ErrorObject, type Options, type ValidateFunction } from "ajv";
import Ajv2019 from "ajv/dist/2019";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { RE2JS } from "re2js";
import type { FlotillaConfig } from "@/lib/config";
import { ConfigError } from "../config/load";
import { AppError } from "../errors";

/**
 * Output schemas (`output_schema` of a batch or a sub-agent definition): compiled once with Ajv
 * and cached by their JSON text. Plain Node (the worker loads it). Submission compiles to refuse a
 * bad schema up front; the executor validates every typed answer with the same validator.
 */

// Schema `pattern` / `patternProperties` are user-supplied: match them in linear time (RE2), not
// with the backtracking RegExp engine.
const re2Engine = Object.assign((pattern: string, _flags: string) => RE2JS.compile(pattern), { code: "re2js" });

const OPTIONS: Options = { strict: false, allErrors: true, code: { regExp: re2Engine } };

type Draft = "07" | "2019" | "2020";
const instances = new Map<Draft, Ajv>();

function ajvFor(schema: unknown): Ajv {
  const declared = schema && typeof schema === "object" && "$schema" in schema ? String(schema.$schema) : "";
  const draft: Draft = declared.includes("2020-12") ? "2020" : declared.includes("2019-09") ? "2019" : "07";
  let ajv = instances.get(draft);
  if (!ajv) {
    ajv = draft === "2020" ? new Ajv2020(OPTIONS) : draft === "2019" ? new Ajv2019(OPTIONS) : new Ajv(OPTIONS);
    addFormats(ajv);
    instances.set(draft, ajv);
  }
  return ajv;
}

const CACHE_MAX = 256;
const cache = new Map<string, ValidateFunction>();

/** A validator for `schema`; throws `validation_failed` "output_schema: ..." when it does not compile. */
export function compileOutputSchema(schema: unknown): ValidateFunction {
  const key = JSON.stringify(schema);
  const hit = cache.get(key);
  if (hit) {
    // Least recently used goes first: re-insert on every hit.
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  if (!schema || typeof schema !== "object" || Array.isArray(schema)) {
    throw new AppError("validation_failed", "output_schema: must be a JSON Schema object");
  }
  const ajv = ajvFor(schema);
  let validate: ValidateFunction;
  try {
    validate = ajv.compile(schema);
  } catch (err) {
    throw new AppError("validation_failed", `output_schema: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    // The shared instance would otherwise keep every schema it compiled (and refuse a second
    // schema reusing an $id); the compiled function stands on its own.
    ajv.removeSchema(schema as object);
  }
  cache.set(key, validate);
  if (cache.size > CACHE_MAX) cache.delete(cache.keys().next().value as string);
  return validate;
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
      compileOutputSchema(d.output_schema);
    } catch (err) {
      const message = err instanceof Error ? err.message.replace(/^output_schema: /, "") : String(err);
      problems.push(`subagents.definitions[${i}].output_schema: ${message}`);
    }
  });
  if (problems.length) throw new ConfigError(problems);
}
