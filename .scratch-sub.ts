import { configSchema } from "@/lib/config";
import { readSubmission } from "@/server/batches/submission-input";
import { normalizeSubmission } from "@/server/batches/validate";
import { submitBatch } from "@/server/batches/repository";
import { createDatabase } from "@/server/db/client";
import { owner } from "./bench/batch.bench";
async function main() {
  const BIG = 100_000;
  const limits = { max_items_per_batch: BIG, max_live_items_per_batch: 10_000, default_max_live_items: 1_000, max_running_items_per_batch: 1_024 };
  const cfg = configSchema.parse({ subagent_batches: limits, quotas: { max_queued_items: 1e8, max_active_batches: 1e5 }, http: { max_body_bytes: 100 * 1024 * 1024 } });
  const body = Array.from({ length: BIG }, (_, i) => `${JSON.stringify({ item_key: `rec-${i}`, prompt: `Classify record ${i}: ${"lorem ipsum ".repeat(6)}` })}\n`).join("");
  const database = createDatabase(process.argv[2]!, { max: 2 });
  const scope = await owner(database.db);
  for (let r = 0; r < 4; r++) {
    const t0 = performance.now();
    const req = new Request(`http://x/api?submission_key=k${r}-${Date.now()}`, { method: "POST", headers: { "content-type": "application/x-ndjson" }, body });
    const input = await readSubmission(req, cfg);
    const t1 = performance.now();
    normalizeSubmission(input as never, cfg);
    const t2 = performance.now();
    await submitBatch(database.db, { ...scope, input, config: cfg, model: { name: "simulator", simulator: true } });
    const t3 = performance.now();
    console.log(`read+parse ${(t1 - t0).toFixed(0)} normalize ${(t2 - t1).toFixed(0)} submitBatch ${(t3 - t2).toFixed(0)} total ${(t3-t0).toFixed(0)}`);
  }
  await database.close();
}
main();
