import type { ReactNode } from "react";

/** One column of a StackedTable: its heading, and its width at a wide screen's width. */
export interface StackedColumn {
  head: ReactNode;
  width?: string;
  /** Heading text shown whole on hover (a heading that may be cut). */
  title?: string;
}

const HEAD = "border-b border-zinc-200 px-3 py-1.5 font-medium";

/**
 * A table at a wide screen's width whose rows stack as cards on a narrow one (the rows render
 * their own cells as `block md:table-cell`). `ready` and `dimmed` say whether the rows shown are
 * the current query's (tests wait on data-ready) or a previous one's kept while it loads.
 */
export function StackedTable({
  labelledBy,
  ready,
  dimmed,
  columns,
  empty,
  emptyTestId,
  data,
  children,
}: {
  labelledBy: string;
  ready: boolean;
  dimmed: boolean;
  columns: StackedColumn[];
  /** What the table says with no rows (null: rows are shown). */
  empty: ReactNode | null;
  emptyTestId?: string;
  /** data-* attributes of the table (data-testid and what tests read). */
  data: Record<`data-${string}`, string | number>;
  children: ReactNode;
}) {
  return (
    <div className="min-w-0 overflow-hidden rounded-lg border border-zinc-200 bg-white">
      <table
        aria-labelledby={labelledBy}
        aria-busy={!ready || undefined}
        data-ready={ready ? "true" : "false"}
        {...data}
        className={`block w-full border-collapse text-left text-xs transition-opacity md:table md:table-fixed ${dimmed ? "opacity-60" : ""}`}
      >
        <colgroup className="max-md:hidden">
          {columns.map((c, i) => (
            <col key={i} className={c.width} />
          ))}
        </colgroup>
        <thead className="bg-zinc-50 text-zinc-600 max-md:hidden">
          <tr>
            {columns.map((c, i) => (
              <th key={i} scope="col" className={c.title === undefined ? HEAD : `${HEAD} truncate`} title={c.title}>
                {c.head}
              </th>
            ))}
          </tr>
        </thead>
        <tbody className="block md:table-row-group">
          {children}
          {empty !== null ? (
            <tr className="block md:table-row">
              <td colSpan={columns.length} data-testid={emptyTestId} className="block px-3 py-6 text-sm text-zinc-600 md:table-cell">
                {empty}
              </td>
            </tr>
          ) : null}
        </tbody>
      </table>
    </div>
  );
}
