import type { CompareSummary } from "@/lib/api/compare";
import { formatCount } from "@/lib/format";

const cell = "px-3 py-1.5 tabular-nums whitespace-nowrap";
const head = "px-3 py-1.5 align-bottom font-medium";

/** Each check's passes and failures on both sides, and the items it improved or regressed on. */
export function CheckChanges({ checks }: { checks: CompareSummary["checks"] }) {
  if (checks.length === 0) return null;
  return (
    <section aria-labelledby="compare-checks-heading" className="min-w-0">
      <h2 id="compare-checks-heading" className="mb-1 text-xs font-medium tracking-wide text-zinc-500 uppercase">
        Checks
      </h2>
      {/* The headers wrap on a narrow screen; a very long check name scrolls this box, never the page. */}
      <div className="min-w-0 overflow-x-auto rounded-lg border border-zinc-200 bg-white">
        <table data-testid="compare-checks" className="w-full border-collapse text-left text-xs">
          <caption className="sr-only">Each check in A and in B</caption>
          <thead className="bg-zinc-50 text-zinc-600">
            <tr>
              <th scope="col" className={head}>Check</th>
              <th scope="col" className={head}>A passed / failed</th>
              <th scope="col" className={head}>B passed / failed</th>
              <th scope="col" className={head}>Improved</th>
              <th scope="col" className={head}>Regressed</th>
            </tr>
          </thead>
          <tbody>
            {checks.map((c) => (
              <tr key={c.name} data-testid="compare-check-row" data-check={c.name} className="border-t border-zinc-100">
                <th scope="row" className="px-3 py-1.5 font-mono font-medium break-all text-zinc-900">
                  {c.name}
                </th>
                <td className={cell}>
                  {formatCount(c.a.passed)} / {formatCount(c.a.failed)}
                </td>
                <td className={cell}>
                  {formatCount(c.b.passed)} / {formatCount(c.b.failed)}
                </td>
                <td className={`${cell} ${c.improved > 0 ? "font-semibold text-emerald-700" : "text-zinc-400"}`}>{formatCount(c.improved)}</td>
                <td className={`${cell} ${c.regressed > 0 ? "font-semibold text-red-700" : "text-zinc-400"}`}>{formatCount(c.regressed)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
