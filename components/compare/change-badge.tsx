import type { ComparePair } from "@/lib/api/compare";

const CHANGE: Record<ComparePair["change"], { label: string; style: string; title: string }> = {
  improved: { label: "improved", style: "bg-emerald-50 text-emerald-800 ring-emerald-200", title: "Failed in A, passed in B" },
  regressed: { label: "regressed", style: "bg-red-50 text-red-800 ring-red-200", title: "Passed in A, failed in B" },
  changed: { label: "changed", style: "bg-amber-50 text-amber-900 ring-amber-200", title: "Same verdict, different output" },
  same: { label: "same", style: "bg-zinc-100 text-zinc-700 ring-zinc-200", title: "Same output and verdict" },
  pending: { label: "pending", style: "bg-sky-50 text-sky-800 ring-sky-200", title: "Not finished on both sides yet" },
};

/** How one pair changed from A to B, as a pill. */
export function ChangeBadge({ change }: { change: ComparePair["change"] }) {
  const c = CHANGE[change];
  return (
    <span
      data-testid="pair-change"
      title={c.title}
      className={`inline-flex shrink-0 items-center whitespace-nowrap rounded-full px-2 py-0.5 text-xs font-medium ring-1 ring-inset ${c.style}`}
    >
      {c.label}
    </span>
  );
}
