import type { CompareSummary } from "@/lib/api/compare";
import { formatCount } from "@/lib/format";

const cell = "px-2 py-1.5 tabular-nums whitespace-nowrap sm:px-3";
const head = "px-2 py-1.5 align-bottom font-medium sm:px-3";

/** "A passed / failed", shortened to "A ✓ / ✗" on a phone so a check's name keeps its room. */
function SideHead({ side }: { side: "A" | "B" }) {
  return (
    <>
      <span className="sm:hidden" aria-hidden>
        {side} ✓ / ✗
      </span>
      <span className="max-sm:sr-only">{side} passed / failed</span>
    </>
  );
}

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
              <th scope="col" className={head}>
                <SideHead side="A" />
              </th>
              <th scope="col" className={head}>
                <SideHead side="B" />
              </th>
              <th scope="col" className={head}>Improved</th>
              <th scope="col" className={head}>Regressed</th>
            </tr>
          </thead>
          <tbody>
            {checks.map((c) => (
              <tr key={c.name} data-testid="compare-check-row" data-check={c.name} className="border-t border-zinc-100">
                <th scope="row" className="min-w-32 px-2 py-1.5 font-mono font-medium wrap-anywhere text-zinc-900 sm:px-3">
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
