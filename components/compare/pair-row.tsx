import type { ComparePair } from "@/lib/api/compare";
import { cellText, inputFields } from "@/lib/result-columns";
import { StatusBadge, VerdictBadge } from "@/components/batches/ui";
import { ChangeBadge } from "./change-badge";
import { ClippedText, valueText } from "./clipped-text";

/**
 * A cell of the pair table: a table cell at a wide screen's width; on a narrow one the table's
 * parts are blocks, so each row is a card whose cells stack, each under its own label.
 */
const CELL = "block min-w-0 px-3 py-1 align-top md:table-cell md:py-2.5";

/** An object item's fields as "name: value" lines, else the input text. */
function inputText(input: string): string {
  const fields = inputFields(input);
  if (!fields) return input;
  return Object.entries(fields)
    .map(([name, value]) => `${name}: ${cellText(value)}`)
    .join("\n");
}

/** A cell's label, shown only where the table's header is not (a narrow screen). */
function NarrowLabel({ children }: { children: React.ReactNode }) {
  return <p className="mb-0.5 text-[11px] font-medium tracking-wide text-zinc-500 uppercase md:hidden">{children}</p>;
}

function SideCell({ label, side }: { label: "A" | "B"; side: ComparePair["a"] }) {
  const failed = side.checks.filter((c) => !c.passed);
  return (
    <td data-testid={`pair-${label.toLowerCase()}`} data-verdict={side.verdict ?? ""} className={CELL}>
      <NarrowLabel>{label}</NarrowLabel>
      <p className="mb-1 flex flex-wrap items-center gap-1.5 text-xs">
        <VerdictBadge verdict={side.verdict} />
        {side.status !== "succeeded" ? <StatusBadge status={side.status} /> : null}
      </p>
      <ClippedText text={valueText(side.output)} mono={typeof side.output !== "string"} empty="no output" testId="pair-output" />
      {failed.length > 0 ? (
        <p data-testid="pair-failed-checks" className="mt-1 text-[11px] text-red-800 wrap-anywhere">
          failed: {failed.map((c) => c.name).join(", ")}
        </p>
      ) : null}
    </td>
  );
}

/** One item of both batches, side by side. */
export function PairRow({ pair }: { pair: ComparePair }) {
  return (
    <tr
      data-testid="pair-row"
      data-item-key={pair.item_key}
      data-change={pair.change}
      className="block border-t border-zinc-200 py-1.5 first:border-t-0 md:table-row md:py-0"
    >
      <th scope="row" className={`${CELL} text-left font-normal`}>
        <span className="flex min-w-0 items-start justify-between gap-2">
          <span className="font-mono text-xs font-medium break-all text-zinc-900">{pair.item_key}</span>
          {/* On a narrow screen the change stands beside the key. */}
          <span className="md:hidden">
            <ChangeBadge change={pair.change} />
          </span>
        </span>
      </th>
      <td className={CELL}>
        <NarrowLabel>Input</NarrowLabel>
        <ClippedText text={inputText(pair.input)} testId="pair-input" />
        {pair.expected !== undefined ? (
          <p className="mt-1 text-[11px] text-zinc-600 wrap-anywhere">
            expected: <span className="font-mono">{cellText(pair.expected)}</span>
          </p>
        ) : null}
      </td>
      <SideCell label="A" side={pair.a} />
      <SideCell label="B" side={pair.b} />
      <td className={`${CELL} max-md:hidden`}>
        <ChangeBadge change={pair.change} />
      </td>
    </tr>
  );
}
