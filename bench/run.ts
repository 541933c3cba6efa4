/**
 * `npm run bench`: runs every registered benchmark module and prints one table.
 * A module exports `name` and `run(): Promise<BenchRow[]>`; add yours to MODULES.
 * `npm run bench -- --check` exits non-zero when a row misses its target. A module that exports
 * `onlyByName` (the guard) runs only when named, and always checks.
 */

import os from "node:os";
import type { BenchModule, BenchRow } from "./types";

const MODULES: Array<() => Promise<BenchModule>> = [
  () => import("./capacity.bench"),
  () => import("./batch.bench"),
  () => import("./e2e.bench"),
  () => import("./scale.bench"),
  () => import("./chat.bench"),
  () => import("./export.bench"),
  () => import("./ratelimit.bench"),
  () => import("./mcp.bench"),
  () => import("./workspace.bench"),
  () => import("./compat.bench"),
  () => import("./auth.bench"),
  () => import("./data.bench"),
  () => import("./steps.bench"),
  () => import("./patterns.bench"),
  () => import("./caching.bench"),
  () => import("./compare.bench"),
  () => import("./golden.bench"),
  () => import("./provider-batch.bench"),
  () => import("./provider-limit.bench"),
  () => import("./guard.bench"),
];

function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  if (Math.abs(n) >= 100) return n.toFixed(0);
  if (Math.abs(n) >= 1) return n.toFixed(2);
  return n.toPrecision(3);
}

/** A row meets its target: at most the target, or within the tolerance of an exact one. */
const meets = (r: BenchRow) => (r.tolerance === undefined ? r.ratio <= r.target : Math.abs(r.ratio - r.target) <= r.tolerance);

async function main() {
  const only = process.argv.slice(2).filter((a) => !a.startsWith("--"));
  let check = process.argv.includes("--check");
  // Each row beside the load average when its module returned it (1, 5, 15 min): a figure taken
  // on a busy machine says so.
  const rows: Array<BenchRow & { module: string; load: string }> = [];
  for (const importModule of MODULES) {
    const mod: BenchModule & { onlyByName?: boolean } = await importModule();
    // A module is chosen by the start of its name: `batch` does not also run `provider-batch`.
    if (only.length ? !only.some((o) => mod.name.startsWith(o)) : mod.onlyByName) continue;
    if (mod.onlyByName) check = true;
    process.stderr.write(`running ${mod.name} ...\n`);
    const got = await mod.run();
    const load = os.loadavg().map((l) => l.toFixed(2)).join(" ");
    for (const row of got) {
      rows.push({ module: mod.name, load, ...row });
      process.stderr.write(`  ${mod.name}: ${row.metric}: ${fmt(row.ours)} (load ${load})\n`);
    }
  }
  const header = ["module", "metric", "ours", "baseline", "ratio", "target", "ok", "load 1/5/15"];
  const table = rows.map((r) => [
    r.module,
    r.metric,
    fmt(r.ours),
    fmt(r.baseline),
    r.tolerance === undefined ? `${r.ratio.toFixed(2)}x` : `${r.ratio.toPrecision(15)}x`,
    r.tolerance === undefined ? `<= ${r.target}x` : `= ${r.target}x ± ${r.tolerance}`,
    meets(r) ? "yes" : "NO",
    r.load,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((t) => t[i].length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(" | ")} |`;
  console.log(line(header));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const t of table) console.log(line(t));
  console.log(`\nnode ${process.version}, ${new Date().toISOString()}`);
  if (check && rows.some((r) => !meets(r))) process.exit(1);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
