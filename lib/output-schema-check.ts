import type { RE2JS } from "re2js";
import { newPatternBudget } from "./check-pattern";
import {
  DATA_KEYWORDS,
  OUTPUT_SCHEMA_META_IDS,
  type OutputSchemaDraft,
  outputSchemaDraft,
  SchemaPatternRefusal,
  schemaPatterns,
  segment,
} from "./output-schema";
import { validateMeta as meta07 } from "./output-schema-meta/07.generated";
import { validateMeta as meta2019 } from "./output-schema-meta/2019.generated";
import { validateMeta as meta2020 } from "./output-schema-meta/2020.generated";

/**
 * The New batch dialog's check of an output schema, without eval (the page's CSP forbids what
 * Ajv's compile does): the schema's patterns under RE2 and the pattern budget (the server's
 * walk), `$schema` naming a draft the server knows, the draft's meta-schema (Ajv's own
 * validator, compiled ahead of time: lib/output-schema-meta/), and every `#/…` `$ref`
 * resolving. What only Ajv's compile finds beyond that (a `$ref` to an `$id` elsewhere, say)
 * is the estimate's 400 to name, as the server refuses it.
 */

type MetaValidator = ((schema: unknown) => boolean) & {
  errors?: { instancePath: string; message?: string }[] | null;
};
const META: Record<OutputSchemaDraft, MetaValidator> = {
  "07": meta07 as MetaValidator,
  "2019": meta2019 as MetaValidator,
  "2020": meta2020 as MetaValidator,
};

/** The value at a `#/a/b` JSON Pointer fragment, or undefined. */
function resolvePointer(root: unknown, ref: string): unknown {
  let node: unknown = root;
  for (const raw of ref.slice(2).split("/")) {
    let key: string;
    try {
      key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
    } catch {
      return undefined;
    }
    if (!node || typeof node !== "object" || !Object.hasOwn(node, key)) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

/** The first `$ref` of the form `#/…` that points at nothing, with its path. */
function unresolvedRef(root: object, field: string): { field: string; message: string } | null {
  const walk = (node: unknown, path: string): { field: string; message: string } | null => {
    if (Array.isArray(node)) {
      for (const [i, item] of node.entries()) {
        const found = walk(item, `${path}.${i}`);
        if (found) return found;
      }
      return null;
    }
    if (!node || typeof node !== "object") return null;
    for (const [key, value] of Object.entries(node)) {
      if (DATA_KEYWORDS.has(key)) continue;
      if (key === "$ref" && typeof value === "string" && value.startsWith("#/") && resolvePointer(root, value) === undefined)
        return { field: path, message: `can't resolve reference ${value}` };
      const found = walk(value, `${path}${segment(key)}`);
      if (found) return found;
    }
    return null;
  };
  return walk(root, field);
}

/**
 * Why `schema` would be refused as an output schema (`{ field, message }`, `field` the path of
 * what is wrong, as the server names it), or null when this check finds nothing.
 */
export function outputSchemaProblem(schema: object, field = "output_schema"): { field: string; message: string } | null {
  try {
    for (const _ of schemaPatterns(schema, field, new Map<string, RE2JS>(), newPatternBudget()));
  } catch (err) {
    if (err instanceof SchemaPatternRefusal) return { field: err.field, message: err.problem };
    throw err;
  }
  const draft = outputSchemaDraft(schema);
  if ("$schema" in schema) {
    const declared = String(schema.$schema);
    if (declared.replace(/#$/, "") !== OUTPUT_SCHEMA_META_IDS[draft]) return { field, message: `no schema with key or ref "${declared}"` };
  }
  const validate = META[draft];
  if (!validate(schema)) {
    const first = validate.errors?.[0];
    const at = `${field}${(first?.instancePath ?? "").split("/").slice(1).map(segment).join("")}`;
    return { field: at, message: first?.message ?? "is not a valid JSON Schema" };
  }
  return unresolvedRef(schema, field);
}
