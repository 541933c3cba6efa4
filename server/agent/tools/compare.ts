import { tool } from "ai";
import { compareBatchesInputSchema } from "@/lib/api/batch-tools";
import type { ComparePair } from "@/lib/api/compare";
import { comparePairs, compareSummary } from "@/server/batches/compare";
import type { LeadToolContext } from "./context";
import { refusing } from "./refusal";

/** How many regressed items the answer shows: enough to see why, few enough for the transcript. */
export const REGRESSED_ITEMS_SHOWN = 5;

/**
 * compare_batches: the lead's answer to "what changed between the two runs". The comparison
 * summary the compare route answers (server/batches/compare.ts), and the first regressed items
 * with their texts cut, so the answer stays within tools.max_output_chars however long the
 * outputs are. Scoped as the route: a in this thread, b any batch of this user; any other id is
 * "batch not found", and nothing of it is read.
 */
export function createCompareBatchesTool(ctx: LeadToolContext) {
  // Each shown text (input, expected, an output, a check's reason) gets an equal share of the room.
  const textMax = Math.max(80, Math.min(500, Math.floor(ctx.config.tools.max_output_chars / (REGRESSED_ITEMS_SHOWN * 8))));
  const cut = (value: unknown): string | null => {
    if (value === null || value === undefined) return null;
    const text = typeof value === "string" ? value : JSON.stringify(value);
    return text.length > textMax ? `${text.slice(0, textMax)}…` : text;
  };
  const side = (s: ComparePair["a"]) => ({
    status: s.status,
    verdict: s.verdict,
    output: cut(s.output),
    // Only the failed checks, with why: a passing one tells nothing new.
    failed_checks: s.checks.filter((c) => !c.passed).map((c) => ({ name: c.name, reason: cut(c.reason) })),
  });
  return tool({
    description:
      "What changed between two runs of the same items, e.g. a batch and a variant of it (batch_task with variant_of): " +
      "items matched by item_key, how many both passed, both failed, improved (failed in a, passed in b) and regressed " +
      "(passed in a, failed in b), the p-value of that difference in words, each check's change, cost, tokens and time " +
      `side by side, and the first ${REGRESSED_ITEMS_SHOWN} regressed items with why they failed. Use it when the user ` +
      "asks what changed, got better or got worse between two runs, or which run to keep. Unfinished items count in " +
      "no column (pending).",
    inputSchema: compareBatchesInputSchema,
    execute: refusing(ctx, "compare_batches", "The comparison is unavailable right now.", async ({ a, b }) => {
      const scope = { userId: ctx.userId, threadId: ctx.threadId, batchId: a, otherId: b };
      const [summary, regressed] = await Promise.all([
        compareSummary(ctx.db, scope),
        comparePairs(ctx.db, { ...scope, change: "regressed", limit: REGRESSED_ITEMS_SHOWN, previewMaxChars: textMax }),
      ]);
      return {
        ...summary,
        regressed_items: regressed.items.map((pair) => ({
          item_key: pair.item_key,
          input: cut(pair.input),
          ...(pair.expected === undefined ? {} : { expected: cut(pair.expected) }),
          a: side(pair.a),
          b: side(pair.b),
        })),
        regressed_not_shown: Math.max(0, summary.verdicts.regressed - regressed.items.length),
      };
    }),
  });
}
