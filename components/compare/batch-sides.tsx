import type { CompareSummary } from "@/lib/api/compare";
import { formatDuration, formatTokens, formatUsd } from "@/lib/format";
import { StatusBadge } from "@/components/batches/ui";

type Side = CompareSummary["a"];

/** A pass rate as people read it: "83%", "—" while nothing was judged. */
export function passRate(rate: number | null): string {
  if (rate === null) return "—";
  const pct = rate * 100;
  return `${Number.isInteger(pct) || pct >= 10 ? Math.round(pct) : pct.toFixed(1)}%`;
}

/** B against A in plain words: "+50 points", "2.0× A", "same". */
function pointsDelta(a: number | null, b: number | null): string {
  if (a === null || b === null) return "";
  const d = Math.round((b - a) * 100);
  return d === 0 ? "same" : `${d > 0 ? "+" : "−"}${Math.abs(d)} points`;
}
function ratio(a: number | null, b: number | null): string {
  if (a === null || b === null || a <= 0 || b <= 0) return "";
  const r = b / a;
  if (Math.abs(r - 1) < 0.05) return "about the same";
  return `${r.toFixed(r < 10 ? 1 : 0)}× A`;
}

/** One batch of the two: which it is, its title, model and status. */
function SideCard({ label, side, testId }: { label: "A" | "B"; side: Side; testId: string }) {
  return (
    <section data-testid={testId} aria-label={`Batch ${label}`} className="min-w-0 rounded-lg border border-zinc-200 bg-white p-3">
      <p className="flex min-w-0 items-center gap-2 text-xs text-zinc-500">
        <span className="inline-flex size-5 shrink-0 items-center justify-center rounded bg-zinc-900 text-[11px] font-semibold text-white">
          {label}
        </span>
        <span className="font-mono">{side.id.slice(0, 8)}</span>
        <StatusBadge status={side.status} className="ml-auto" />
      </p>
      <p data-testid={`${testId}-title`} title={side.title} className="mt-1.5 truncate text-sm font-semibold text-zinc-900">
        {side.title}
      </p>
      <p className="mt-0.5 truncate text-xs text-zinc-600">
        model <span className="font-medium text-zinc-800">{side.model}</span>
      </p>
    </section>
  );
}

/** Both batches side by side, then their figures: pass rate, cost, tokens and the median item's time. */
export function BatchSides({ summary }: { summary: CompareSummary }) {
  const { a, b } = summary;
  const rows = [
    { key: "pass-rate", label: "Pass rate", a: passRate(a.pass_rate), b: passRate(b.pass_rate), change: pointsDelta(a.pass_rate, b.pass_rate) },
    { key: "cost", label: "Cost", a: formatUsd(summary.cost_usd.a), b: formatUsd(summary.cost_usd.b), change: ratio(summary.cost_usd.a, summary.cost_usd.b) },
    {
      key: "time",
      label: "Time per item (median)",
      a: formatDuration(summary.duration_ms_p50.a),
      b: formatDuration(summary.duration_ms_p50.b),
      change: ratio(summary.duration_ms_p50.a, summary.duration_ms_p50.b),
    },
    {
      key: "tokens",
      label: "Tokens",
      a: `${formatTokens(summary.tokens.a.input)} in · ${formatTokens(summary.tokens.a.output)} out`,
      b: `${formatTokens(summary.tokens.b.input)} in · ${formatTokens(summary.tokens.b.output)} out`,
      change: "",
    },
  ];
  return (
    <div className="flex min-w-0 flex-col gap-3">
      <div className="grid min-w-0 grid-cols-1 gap-3 sm:grid-cols-2">
        <SideCard label="A" side={a} testId="compare-side-a" />
        <SideCard label="B" side={b} testId="compare-side-b" />
      </div>
      <div className="min-w-0 overflow-x-auto rounded-lg border border-zinc-200 bg-white">
        <table data-testid="compare-figures" className="w-full border-collapse text-left text-xs">
          <caption className="sr-only">A and B side by side</caption>
          <thead className="bg-zinc-50 text-zinc-600">
            <tr>
              <th scope="col" className="px-3 py-1.5 font-medium">
                <span className="sr-only">Figure</span>
              </th>
              <th scope="col" className="px-3 py-1.5 font-medium">A</th>
              <th scope="col" className="px-3 py-1.5 font-medium">B</th>
              <th scope="col" className="px-3 py-1.5 font-medium">B against A</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((r) => (
              <tr key={r.key} data-testid={`compare-figure-${r.key}`} className="border-t border-zinc-100">
                <th scope="row" className="px-3 py-1.5 font-medium text-zinc-600">
                  {r.label}
                </th>
                <td className="px-3 py-1.5 font-medium text-zinc-900 tabular-nums">{r.a}</td>
                <td className="px-3 py-1.5 font-medium text-zinc-900 tabular-nums">{r.b}</td>
                <td className="px-3 py-1.5 text-zinc-600 tabular-nums">{r.change}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </div>
  );
}
