import { sql } from "drizzle-orm";
import { createApiToken } from "@/server/auth/tokens";
import { createDatabase } from "@/server/db/client";
import { benchServer, freshDatabase, owner } from "./batch.bench";
import type { BenchRow } from "./types";
import { startWeb } from "./web";

/**
 * Judging a batch (issue 40): the comparison summary of two finished 100,000-item batches,
 * `GET .../compare/{b}` over HTTP through scripts/web.ts as `npm start` runs it. Both batches are
 * submitted over HTTP; their items are then finished in SQL (run, verdict, checks, output, times)
 * so the row measures the comparison, not the run. The target is absolute: the summary answers
 * within 1 s (ratio = median ms / 1000). A page of regressed pairs is timed beside it.
 * COMPARE_BENCH_ITEMS (default 100,000) sizes it.
 */

export const name = "compare";

const ITEMS = Number(process.env.COMPARE_BENCH_ITEMS ?? 100_000);
const PORT = 3231;
const webEnv = {
  FLOTILLA__SUBAGENT_BATCHES: JSON.stringify({ max_items_per_batch: Math.max(ITEMS, 10_000), max_live_items_per_batch: 10_000 }),
  FLOTILLA__QUOTAS: JSON.stringify({ max_queued_items: 100_000_000, max_active_batches: 100_000 }),
  FLOTILLA__HTTP: JSON.stringify({ max_body_bytes: 100 * 1024 * 1024 }),
};
const log = (msg: string) => process.stderr.write(`  compare: ${msg}\n`);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function run(): Promise<BenchRow[]> {
  const server = await benchServer();
  const bdb = await freshDatabase(server.adminUrl);
  const database = createDatabase(bdb.url, { max: 2 });
  const web = await startWeb(bdb.url, { env: webEnv, port: PORT });
  try {
    const { userId, threadId } = await owner(database.db);
    const token = await createApiToken(database.db, { userId });
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    const base = `${web.base}/api/threads/${threadId}/subagent-batches`;
    const submit = async (key: string) => {
      const items = Array.from({ length: ITEMS }, (_, i) => ({ item_key: `k${i}`, text: `Review ${i}: fine.`, expected: { label: "positive" } }));
      const body = { submission_key: key, items, prompt_template: "Classify: {{text}}", checks: [{ name: "says_yes", type: "regex", pattern: "^yes" }] };
      const res = await fetch(base, { method: "POST", headers, body: JSON.stringify(body) });
      if (res.status !== 201) throw new Error(`submit: HTTP ${res.status} ${(await res.text()).slice(0, 300)}`);
      return ((await res.json()) as { id: string }).id;
    };
    const a = await submit("compare-a");
    const b = await submit("compare-b");
    // Finish every item: a passes 70 %, b 75 % (with some of a's passes regressing), one check each.
    for (const [id, mod] of [[a, 10], [b, 4]] as const) {
      await database.db.execute(sql`
        update subagent_batch_items set
          status = 'succeeded',
          verdict = case when position % ${mod} < ${mod === 10 ? 7 : 3} then 'passed' else 'failed' end,
          checks = jsonb_build_array(jsonb_build_object('name', 'says_yes', 'passed', position % ${mod} < ${mod === 10 ? 7 : 3})),
          output = jsonb_build_object('label', case when position % ${mod} < ${mod === 10 ? 7 : 3} then 'yes' else 'no' end),
          result = case when position % ${mod} < ${mod === 10 ? 7 : 3} then 'yes' else 'no' end,
          started_at = now() - interval '2 seconds', finished_at = now() - (position % 1000) * interval '1 millisecond',
          input_tokens = 120, output_tokens = 8, cost_usd = 0.0001
        where batch_id = ${id}`);
    }
    await database.db.execute(sql`vacuum analyze subagent_batch_items`);
    const url = `${base}/${a}/compare/${b}`;
    const time = async (u: string) => {
      const started = performance.now();
      const res = await fetch(u, { headers });
      const body = await res.text();
      if (res.status !== 200) throw new Error(`compare: HTTP ${res.status} ${body.slice(0, 300)}`);
      return { ms: performance.now() - started, body };
    };
    const first = await time(url); // warm-up: route compile, plans, the pages in shared buffers
    const verdicts = (JSON.parse(first.body) as { verdicts: Record<string, number> }).verdicts;
    log(`verdicts ${JSON.stringify(verdicts)}`);
    const summary: number[] = [];
    const pages: number[] = [];
    for (let i = 0; i < 5; i++) {
      summary.push((await time(url)).ms);
      pages.push((await time(`${url}/items?change=regressed&limit=50`)).ms);
    }
    const s = median(summary);
    const p = median(pages);
    log(`summary ms ${summary.map((x) => x.toFixed(0)).join(", ")}; regressed page ms ${pages.map((x) => x.toFixed(0)).join(", ")}`);
    return [
      { metric: `compare: summary of two ${ITEMS}-item batches over HTTP, median ms vs the 1 s target`, ours: s, baseline: 1000, ratio: s / 1000, target: 1 },
      { metric: `compare: a 50-pair page of regressed items over HTTP, median ms vs the 1 s target`, ours: p, baseline: 1000, ratio: p / 1000, target: 1 },
    ];
  } finally {
    await web.stop();
    await database.close();
    await bdb.close();
    await server.stop();
  }
}
