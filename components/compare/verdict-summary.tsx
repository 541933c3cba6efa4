import type { CompareSummary } from "@/lib/api/compare";
import { formatCount } from "@/lib/format";

const plural = (n: number, one: string, many: string) => `${formatCount(n)} ${n === 1 ? one : many}`;

/**
 * What changed, at a glance: improved and regressed items with the p-value in words (the
 * server's exact McNemar test), what stayed, what is still running, and items only one side has.
 */
export function VerdictSummary({ summary }: { summary: CompareSummary }) {
  const { verdicts: v, items } = summary;
  const better = v.improved > v.regressed;
  const worse = v.improved < v.regressed;
  return (
    <section aria-labelledby="compare-verdicts-heading" data-testid="compare-verdicts" className="min-w-0 rounded-lg border border-zinc-200 bg-white p-3">
      <h2 id="compare-verdicts-heading" className="text-xs font-medium tracking-wide text-zinc-500 uppercase">
        Item by item
      </h2>
      <p className="mt-1 flex flex-wrap items-baseline gap-x-3 gap-y-1 text-lg font-semibold text-zinc-900">
        <span data-testid="compare-improved" className="text-emerald-700 tabular-nums">
          {formatCount(v.improved)} improved
        </span>
        <span data-testid="compare-regressed" className={`tabular-nums ${v.regressed > 0 ? "text-red-700" : "text-zinc-500"}`}>
          {formatCount(v.regressed)} regressed
        </span>
      </p>
      <p
        data-testid="compare-p-words"
        data-p-value={summary.p_value}
        className={`mt-1 text-sm ${summary.p_value < 0.05 ? (better ? "text-emerald-800" : worse ? "text-red-800" : "text-zinc-700") : "text-zinc-700"}`}
      >
        {summary.p_value_words}
      </p>
      <p data-testid="compare-unchanged" className="mt-2 text-xs text-zinc-600 tabular-nums">
        {formatCount(items.matched)} matched by item key: {formatCount(v.both_passed)} passed in both, {formatCount(v.both_failed)} failed in
        both{v.unjudged > 0 ? `, ${formatCount(v.unjudged)} with no verdict (cancelled)` : ""}.
        {items.only_a > 0 ? ` ${plural(items.only_a, "item is", "items are")} only in A.` : ""}
        {items.only_b > 0 ? ` ${plural(items.only_b, "item is", "items are")} only in B.` : ""}
      </p>
      {summary.pending > 0 ? (
        <p data-testid="compare-pending" role="status" className="mt-1 text-xs text-amber-800">
          {plural(summary.pending, "pair has", "pairs have")} not finished on both sides yet: {summary.pending === 1 ? "it counts" : "they count"} in
          no column until then.
        </p>
      ) : null}
    </section>
  );
}
