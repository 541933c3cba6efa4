import { batchSubagent } from "@/server/agent/registry";
import { sql } from "drizzle-orm";
import { configSchema } from "@/lib/config";
import { submitBatch } from "@/server/batches/submit";
import { exportResultsStream } from "@/server/http/export";
import { createDatabase } from "@/server/db/client";
import { putFiles, workspaceLimits } from "@/server/workspace/files";
import { benchServer, freshDatabase, owner, waitTerminal } from "./batch.bench";
import type { BenchRow } from "./types";
import { spawnBenchWorkers, stopBenchWorkers } from "./workers";

/**
 * A batch over workspace files vs the same batch without tools, end to end through a real
 * worker process (`server/worker/main.ts`: sub-agent executor, run records, simulator at 0 ms):
 * 200 items, 16 at a time. With files, every item is two model steps — the simulator's
 * `[[tool:read_file ...]]` makes it read its own 2 KB file from PostgreSQL, then answer with
 * what it read — so the ratio is the whole cost of one workspace tool round trip per item.
 * Target ≤ 2.0×: reading a file may cost up to as much as a whole second item, not more.
 * Three alternating rounds each; medians.
 */

export const name = "workspace";

const ITEMS = 200;
const RUNNING = 16;
const ROUNDS = 3;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function run(): Promise<BenchRow[]> {
  const server = await benchServer();
  const bdb = await freshDatabase(server.adminUrl);
  const database = createDatabase(bdb.url, { max: 4 });
  const children = spawnBenchWorkers({
    databaseUrl: bdb.url,
    count: 1,
    slots: RUNNING,
    env: { FLOTILLA__SIMULATOR__LATENCY_MS: "0", FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.05" },
  });
  try {
    const config = configSchema.parse({ subagent_batches: { max_live_items_per_batch: 1_000 } });
    const scope = await owner(database.db);
    const body = (i: number) => `File ${i}. ${"The quarterly figures are in line with the plan. ".repeat(40)}`;
    await putFiles(
      database.db,
      { ...scope, limits: workspaceLimits(config) },
      Array.from({ length: ITEMS }, (_, i) => ({
        path: `docs/file-${String(i).padStart(3, "0")}.txt`,
        bytes: Buffer.from(body(i)),
        contentType: "text/plain",
      })),
    );
    for (;;) {
      const [row] = await database.db.execute<{ n: number }>(sql`select count(*)::int as n from worker_heartbeats where stopped_at is null`);
      if (row!.n >= 1) break;
      await sleep(100);
    }

    let n = 0;
    const batch = async (overFiles: boolean, count: number): Promise<number> => {
      const window = { max_running_items: RUNNING, max_live_items: count };
      const input = overFiles
        ? { submission_key: `ws-${++n}`, files: count === ITEMS ? "docs/*" : "docs/file-00*", prompt_template: 'Summarize {{file}} [[tool:read_file {"path":"{{file}}"}]]', ...window }
        : { submission_key: `ws-${++n}`, prompt_template: "Summarize docs/file-{{item}}.txt", items: Array.from({ length: count }, (_, i) => String(i).padStart(3, "0")), ...window };
      const { batch: b } = await submitBatch(database.db, { ...batchSubagent(config, undefined), ...scope, input, config, model: { name: "simulator", simulator: true } });
      const done = await waitTerminal(database.db, { ...scope, batchId: b.id }, 300_000);
      if (done.succeededCount !== done.total) {
        const [failed] = await database.db.execute<{ error: string | null }>(
          sql`select error from subagent_batch_items where batch_id = ${b.id} and status <> 'succeeded' limit 1`,
        );
        throw new Error(`workspace bench: ${done.succeededCount}/${done.total} succeeded; first failure: ${failed?.error}`);
      }
      if (overFiles)
        for (const text of (await new Response(await exportResultsStream(database.sql, { batchId: b.id, userId: scope.userId, maxMs: 600_000 })).text()).trimEnd().split("\n")) {
          const line = JSON.parse(text) as { item_key: string; result: string | null };
          if (!line.result?.includes(`File ${Number(line.item_key.slice(10, 13))}.`))
            throw new Error(`workspace bench: ${line.item_key} did not read its file`);
        }
      return (done.finishedAt!.getTime() - done.createdAt.getTime()) / 1000;
    };

    await batch(false, 10); // warm-up: module loading and JIT in the worker
    await batch(true, 10);
    const plain: number[] = [];
    const files: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      plain.push(await batch(false, ITEMS));
      files.push(await batch(true, ITEMS));
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const ours = median(files);
    const baseline = median(plain);
    return [
      {
        metric: `batch over files: ${ITEMS} items each reading its file (read_file) vs no tools, ${RUNNING} at a time, 1 worker: wall s (${(ITEMS / ours).toFixed(0)} vs ${(ITEMS / baseline).toFixed(0)} items/s)`,
        ours,
        baseline,
        ratio: ours / baseline,
        target: 2,
      },
    ];
  } finally {
    await stopBenchWorkers(children);
    await database.close();
    await bdb.close();
    await server.stop();
  }
}
