import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import ts from "typescript";

/**
 * Function lengths of the TypeScript under the given folders (function declarations and
 * expressions, arrow functions, methods, constructors and accessors): lines from the first to
 * the last, longest first. `npx tsx scripts/function-lengths.ts server/agent server/worker`.
 * test/runtime/function-lengths.test.ts holds the limit for server/agent and server/worker.
 */

export interface FunctionLength {
  file: string;
  name: string;
  line: number;
  lines: number;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) return filesUnder(path);
    return /\.tsx?$/.test(entry) && !entry.endsWith(".d.ts") ? [path] : [];
  });
}

function nameOf(node: ts.Node, source: ts.SourceFile): string {
  const named = node as { name?: ts.Node };
  if (named.name) return named.name.getText(source);
  // An arrow or function expression takes the name of what it is assigned to.
  const parent = node.parent;
  if (parent && (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)))
    return parent.name.getText(source);
  return "(anonymous)";
}

export function functionLengths(root: string, folders: readonly string[]): FunctionLength[] {
  const out: FunctionLength[] = [];
  for (const file of folders.flatMap((f) => filesUnder(join(root, f)))) {
    const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node) => {
      if (ts.isFunctionLike(node) && (node as ts.FunctionLikeDeclaration).body) {
        const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
        const end = source.getLineAndCharacterOfPosition(node.getEnd()).line;
        out.push({ file: relative(root, file), name: nameOf(node, source), line: start + 1, lines: end - start + 1 });
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return out.sort((a, b) => b.lines - a.lines);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/^.*\//, ""))) {
  const folders = process.argv.slice(2);
  for (const f of functionLengths(process.cwd(), folders.length ? folders : ["server/agent", "server/worker"]).slice(0, 20))
    console.log(`${String(f.lines).padStart(4)}  ${f.file}:${f.line}  ${f.name}`);
}
