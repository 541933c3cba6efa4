"use client";

import { Options } from "@/components/ui/field";
import { type Verdict, verdictSchema } from "@/lib/api/batch-data";
import { type BatchProjection, type ItemStatus, itemStatusSchema } from "@/lib/api/batches";
import { DownloadLink } from "@/components/ui/download-link";
import { formatCount } from "@/lib/format";
import { resultsFileName, resultsUrl } from "./api";
import { ITEM_STATES } from "./status";

/** Above a batch's table: its filters and downloads. */

/**
 * The filters of a batch's table (all server-side: `?status=&verdict=`, the Results view's
 * `?check=&check_result=` and `?q=`); null is "All".
 */
export interface TableFilter {
  status: ItemStatus | null;
  verdict: Verdict | null;
  /** One check's result: `<name>:passed` or `<name>:failed`. */
  check?: string | null;
  /** Text in the item key, input or answer. */
  q?: string | null;
}

export const NO_FILTER: TableFilter = { status: null, verdict: null };

const VERDICT_WORDS: Record<Verdict, string> = { passed: "Passed", failed: "Failed" };

/** How many items match, from the batch's counters; null when no counter says (a status and a verdict). */
export function matchingCount(batch: BatchProjection, filter: TableFilter): number | null {
  if (filter.check || filter.q) return null;
  if (filter.verdict !== null) return filter.status === null ? batch.verdicts[filter.verdict] : null;
  return filter.status === null ? batch.total : batch.counts[filter.status];
}

/** `?status=…&verdict=…`, or nothing without those (the downloads and the full-width page take them; the exports filter by no check or text). */
export function filterQuery(filter: TableFilter): string {
  const q = new URLSearchParams();
  if (filter.status) q.set("status", filter.status);
  if (filter.verdict) q.set("verdict", filter.verdict);
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** "Status" (every item state, with its count) and, with `verdict`, "Verdict". */
export function FilterBar({
  batch,
  filter,
  onChange,
  verdict,
}: {
  batch: BatchProjection;
  filter: TableFilter;
  onChange: (filter: TableFilter) => void;
  verdict: boolean;
}) {
  return (
    <div className="flex flex-wrap items-center gap-x-3 gap-y-2">
      <FilterSelect
        label="Status"
        value={filter.status}
        onChange={(status) => onChange({ ...filter, status: status as ItemStatus | null })}
        all={`All (${formatCount(batch.total)})`}
        options={itemStatusSchema.options.map((s) => ({ value: s, label: `${ITEM_STATES[s].label} (${formatCount(batch.counts[s])})` }))}
      />
      {verdict ? (
        <FilterSelect
          label="Verdict"
          value={filter.verdict}
          onChange={(v) => onChange({ ...filter, verdict: v as Verdict | null })}
          all="All"
          options={verdictSchema.options.map((v) => ({ value: v, label: `${VERDICT_WORDS[v]} (${formatCount(batch.verdicts[v])})` }))}
        />
      ) : null}
    </div>
  );
}

function FilterSelect({
  label,
  value,
  onChange,
  all,
  options,
}: {
  label: string;
  value: string | null;
  onChange: (value: string | null) => void;
  all: string;
  options: { value: string; label: string }[];
}) {
  return (
    <label className="flex items-center gap-1.5">
      <span className="text-xs text-zinc-600">{label}</span>
      <select
        aria-label={label}
        value={value ?? "all"}
        onChange={(e) => onChange(e.target.value === "all" ? null : e.target.value)}
        className="rounded-md border border-zinc-300 bg-white px-2 py-1 text-sm focus-visible:outline-2 focus-visible:outline-sky-600"
      >
        <option value="all">{all}</option>
        <Options options={options} />
      </select>
    </label>
  );
}

/** "Download CSV" and "Download JSONL": the rows that match the filters, whatever is loaded here. */
export function Downloads({ threadId, batchId, filter }: { threadId: string; batchId: string; filter: TableFilter }) {
  const query = filterQuery(filter);
  return (
    <span className="ml-auto flex flex-wrap gap-2">
      {(["csv", "jsonl"] as const).map((format) => (
        <DownloadLink key={format} href={`${resultsUrl(threadId, batchId, format)}${query}`} fileName={resultsFileName(batchId, format)}>
          Download {format.toUpperCase()}
        </DownloadLink>
      ))}
    </span>
  );
}
