import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

/**
 * What the plain-Node processes load: the worker (`npm run worker`), the start script and the
 * CLI run without Next.js and without the react-server condition, where `import "server-only"`
 * throws. Walks each entry's runtime imports (type-only imports are erased, so not followed) and
 * fails on `server-only` or Next.js. The web-only modules carry `server-only`; the walk must see
 * it from the web entry, or it proves nothing.
 */

const root = path.resolve(__dirname, "../..");
const FORBIDDEN = /^(server-only|next)(\/|$)/;

function resolveLocal(from: string, spec: string): string | null {
  let base: string;
  if (spec.startsWith("@/")) base = path.join(root, spec.slice(2));
  else if (spec.startsWith(".")) base = path.resolve(path.dirname(from), spec);
  else return null;
  for (const candidate of [base, `${base}.ts`, `${base}.tsx`, path.join(base, "index.ts")])
    if (existsSync(candidate) && statSync(candidate).isFile()) return candidate;
  throw new Error(`${path.relative(root, from)}: cannot resolve ${spec}`);
}

/** The module specifiers a file loads at run time. */
function runtimeImports(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const specs: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node) && !node.importClause?.isTypeOnly && ts.isStringLiteral(node.moduleSpecifier))
      specs.push(node.moduleSpecifier.text);
    else if (ts.isExportDeclaration(node) && !node.isTypeOnly && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier))
      specs.push(node.moduleSpecifier.text);
    else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] &&
      ts.isStringLiteral(node.arguments[0])
    )
      specs.push(node.arguments[0].text);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return specs;
}

/** Every forbidden package the entry reaches, with the chain of files that gets there. */
function forbiddenReached(entry: string): string[] {
  const start = path.join(root, entry);
  const via = new Map<string, string | null>([[start, null]]);
  const queue = [start];
  const found: string[] = [];
  const chain = (file: string): string[] => {
    const parent = via.get(file);
    return [...(parent ? chain(parent) : []), path.relative(root, file)];
  };
  while (queue.length > 0) {
    const file = queue.shift()!;
    for (const spec of runtimeImports(file)) {
      const local = resolveLocal(file, spec);
      if (local) {
        if (!via.has(local)) {
          via.set(local, file);
          queue.push(local);
        }
      } else if (FORBIDDEN.test(spec)) found.push(`${spec} via ${chain(file).join(" → ")}`);
    }
  }
  return found;
}

describe("plain-Node processes never load server-only or Next.js", () => {
  it.each(["server/worker/main.ts", "scripts/start.ts", "scripts/cli.ts"])("%s", (entry) => {
    expect(forbiddenReached(entry)).toEqual([]);
  });

  it("sees server-only from the web process's entry (the walk would catch it)", () => {
    expect(forbiddenReached("server/web-process.ts").some((f) => f.startsWith("server-only via"))).toBe(true);
  });
});
