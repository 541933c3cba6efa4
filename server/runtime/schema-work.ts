/**
 * How much work one value can cost an output schema, bounded before anything compiles it
 * (DESIGN.md "Holding under abuse"). Ajv evaluates a subschema once for every path that reaches
 * it, so `$ref` / `allOf` / `anyOf` / `oneOf` fan-out multiplies through references: ten
 * `$ref`s to a definition that holds ten `$ref`s to the next one, seven deep, is ten million
 * evaluations of the last one on a single string, from a 1.8 KB schema. This counts, on the
 * schema's own structure, the most subschema evaluations any one value of an answer can
 * receive, with references followed (within the schema only) and recursion through child
 * values unfolded SCHEMA_DEPTH levels deep; past SCHEMA_MAX_EVALUATIONS the schema is refused.
 * Plain Node: the worker loads it.
 */

/** The most subschema evaluations one value of an answer may receive. */
export const SCHEMA_MAX_EVALUATIONS = 1_000;
/** How many levels of child values a recursive schema is unfolded to when it is counted. */
const SCHEMA_DEPTH = 32;

/** Keywords whose schema applies to the same value (they add up). */
const IN_PLACE_ONE = ["not", "if", "then", "else"];
const IN_PLACE_LIST = ["allOf", "anyOf", "oneOf"];
const IN_PLACE_MAP = ["dependentSchemas", "dependencies"];
/** Keywords whose schema applies to every child value (or every key) they reach. */
const CHILD_ONE = ["additionalProperties", "unevaluatedProperties", "propertyNames", "additionalItems", "unevaluatedItems", "contains"];
/** Keywords whose schemas each apply to a different child (one key, one position): the largest counts. */
const CHILD_ALTERNATIVES_MAP = ["properties"];
const CHILD_ALTERNATIVES_LIST = ["prefixItems"];
const REF_KEYWORDS = ["$ref", "$dynamicRef", "$recursiveRef"];

export class SchemaWorkRefusal extends Error {}

type Node = Record<string, unknown> | boolean;

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === "object" && !Array.isArray(v);
const isNode = (v: unknown): v is Node => typeof v === "boolean" || isObject(v);

/** Where each schema resource (`$id`), anchor and dynamic anchor of the document is, by absolute URI. */
interface Index {
  resources: Map<string, Node>;
  anchors: Map<string, Node>;
  dynamic: Map<string, Node[]>;
  base: WeakMap<object, string>;
}

const ROOT_URI = "flotilla:/output-schema";

function withoutFragment(uri: string): string {
  const hash = uri.indexOf("#");
  return hash < 0 ? uri : uri.slice(0, hash);
}

function join(ref: string, base: string): string | null {
  try {
    return new URL(ref, base).href;
  } catch {
    return null;
  }
}

const SCHEMA_MAPS = ["properties", "patternProperties", "$defs", "definitions", ...IN_PLACE_MAP];
const SCHEMA_LISTS = [...IN_PLACE_LIST, ...CHILD_ALTERNATIVES_LIST, "items"];
const SCHEMA_ONE = [...IN_PLACE_ONE, ...CHILD_ONE, "items"];

/** Every subschema of `node` under the keywords that hold schemas. */
function* subschemas(node: Record<string, unknown>): Generator<unknown> {
  for (const k of SCHEMA_MAPS) if (isObject(node[k])) yield* Object.values(node[k] as object);
  for (const k of SCHEMA_LISTS) if (Array.isArray(node[k])) yield* node[k] as unknown[];
  for (const k of SCHEMA_ONE) if (isObject(node[k])) yield node[k];
}

function indexSchema(root: Node): Index {
  const index: Index = { resources: new Map([[ROOT_URI, root]]), anchors: new Map(), dynamic: new Map(), base: new WeakMap() };
  const seen = new WeakSet<object>();
  const visit = (node: unknown, base: string) => {
    if (!isObject(node) || seen.has(node)) return;
    seen.add(node);
    let here = base;
    if (typeof node.$id === "string") {
      const id = join(node.$id, base);
      if (id) {
        if (node.$id.startsWith("#")) index.anchors.set(id, node); // draft-07 `$id: "#name"`
        else {
          here = withoutFragment(id);
          index.resources.set(here, node);
        }
      }
    }
    index.base.set(node, here);
    if (typeof node.$anchor === "string") index.anchors.set(`${here}#${node.$anchor}`, node);
    if (typeof node.$dynamicAnchor === "string") {
      index.anchors.set(`${here}#${node.$dynamicAnchor}`, node);
      const list = index.dynamic.get(node.$dynamicAnchor) ?? [];
      list.push(node);
      index.dynamic.set(node.$dynamicAnchor, list);
    }
    for (const sub of subschemas(node)) visit(sub, here);
  };
  visit(root, ROOT_URI);
  return index;
}

/** The JSON Pointer `pointer` (a URI fragment) from `node`, or undefined. */
function pointerFrom(node: unknown, pointer: string): unknown {
  let cur = node;
  for (const raw of pointer.split("/").slice(1)) {
    let token: string;
    try {
      token = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
    } catch {
      return undefined;
    }
    if (Array.isArray(cur)) cur = /^\d+$/.test(token) ? cur[Number(token)] : undefined;
    else if (isObject(cur) && Object.hasOwn(cur, token)) cur = cur[token];
    else return undefined;
  }
  return cur;
}

/** What a reference keyword of `node` may reach (every schema a dynamic reference could mean); none when it leaves the schema. */
function targets(index: Index, node: Record<string, unknown>, keyword: string, ref: string): Node[] {
  const base = index.base.get(node) ?? ROOT_URI;
  if (keyword === "$recursiveRef") return [index.resources.get(withoutFragment(join(ref, base) ?? "")) ?? index.resources.get(ROOT_URI)!];
  const uri = join(ref, base);
  if (uri === null) return [];
  const hash = uri.indexOf("#");
  const doc = withoutFragment(uri);
  const fragment = hash < 0 ? "" : uri.slice(hash + 1);
  const resource = index.resources.get(doc);
  const found: Node[] = [];
  if (resource !== undefined) {
    const target = fragment === "" ? resource : fragment.startsWith("/") ? pointerFrom(resource, fragment) : index.anchors.get(uri);
    if (isNode(target)) found.push(target);
  }
  if (keyword === "$dynamicRef" && !fragment.startsWith("/")) found.push(...(index.dynamic.get(fragment) ?? []));
  return found;
}

/** Element-wise: `into[k] += add[k]`, or the larger of the two with `max`. */
function merge(into: number[], add: readonly number[], max = false): void {
  for (let k = 0; k < add.length; k++) into[k] = max ? Math.max(into[k] ?? 0, add[k]!) : (into[k] ?? 0) + add[k]!;
}

/**
 * The most subschema evaluations any one value of an answer receives from `schema`, as an upper
 * bound: for each level of child values, what reaches a value there (schemas that apply to the
 * same value add up, and so do those that reach the same child: `items`, `additionalProperties`,
 * `patternProperties`, `contains`; `properties` and `prefixItems` each reach a different one, so
 * the largest counts). A reference that leaves the schema (Ajv resolves its own meta-schemas; it
 * refuses the rest) cannot be counted: such a schema counts as SCHEMA_MAX_EVALUATIONS. Throws a
 * SchemaWorkRefusal saying why past SCHEMA_MAX_EVALUATIONS, or for a reference cycle that never
 * moves to a child value.
 */
export function schemaEvaluations(schema: unknown): number {
  if (!isNode(schema)) return 1;
  const index = indexSchema(schema);
  let unresolved = false;
  const memo = new Map<Node, Map<number, number[]>>();
  // The (node, depth) pairs being counted: meeting one again is a cycle that stays on one value.
  const active = new Map<Node, Set<number>>();

  // What `node` costs the value it is applied to ([0]) and the values k levels below it ([k]), k ≤ depth.
  const count = (node: unknown, depth: number): number[] => {
    if (!isObject(node)) return isNode(node) ? [1] : [];
    const known = memo.get(node)?.get(depth);
    if (known) return known;
    const marks = active.get(node) ?? new Set<number>();
    active.set(node, marks);
    if (marks.has(depth)) throw new SchemaWorkRefusal("a reference cycle returns to the same value without end (it never moves to a property or an item)");
    marks.add(depth);
    const levels = [1];
    const inPlace = (sub: unknown) => merge(levels, count(sub, depth));
    for (const k of IN_PLACE_ONE) if (k in node) inPlace(node[k]);
    for (const k of IN_PLACE_LIST) if (Array.isArray(node[k])) for (const sub of node[k] as unknown[]) inPlace(sub);
    for (const k of IN_PLACE_MAP) if (isObject(node[k])) for (const sub of Object.values(node[k] as object)) inPlace(sub);
    for (const k of REF_KEYWORDS)
      if (typeof node[k] === "string") {
        const reached = targets(index, node, k, node[k] as string);
        if (reached.length === 0) unresolved = true;
        for (const target of reached) inPlace(target);
      }
    if (depth > 0) {
      const below: number[] = [];
      const every = (sub: unknown) => merge(below, count(sub, depth - 1));
      for (const k of CHILD_ONE) if (k in node) every(node[k]);
      if (isNode(node.items)) every(node.items);
      if (isObject(node.patternProperties)) for (const sub of Object.values(node.patternProperties as object)) every(sub);
      const widest: number[] = [];
      const alternatives = [
        ...CHILD_ALTERNATIVES_MAP.flatMap((k) => (isObject(node[k]) ? Object.values(node[k] as object) : [])),
        ...CHILD_ALTERNATIVES_LIST.flatMap((k) => (Array.isArray(node[k]) ? (node[k] as unknown[]) : [])),
        ...(Array.isArray(node.items) ? node.items : []),
      ];
      for (const sub of alternatives) merge(widest, count(sub, depth - 1), true);
      merge(below, widest);
      merge(levels, [0, ...below]);
    }
    marks.delete(depth);
    if (levels.some((n) => n > SCHEMA_MAX_EVALUATIONS))
      throw new SchemaWorkRefusal(
        `one value can be checked against more than ${SCHEMA_MAX_EVALUATIONS} subschemas ($ref / allOf / anyOf / oneOf fan-out multiplies through references); at most ${SCHEMA_MAX_EVALUATIONS}`,
      );
    const byDepth = memo.get(node) ?? new Map<number, number[]>();
    byDepth.set(depth, levels);
    memo.set(node, byDepth);
    return levels;
  };
  const most = Math.max(...count(schema, SCHEMA_DEPTH));
  return unresolved ? SCHEMA_MAX_EVALUATIONS : most;
}
