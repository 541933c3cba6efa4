"use client";

import { type ReactNode, useId, useState } from "react";

/** A collapsible section's state: whether it is folded, and the ids its header and body share. */
export interface Fold {
  headingId: string;
  bodyId: string;
  collapsed: boolean;
  setCollapsed: (collapsed: boolean | ((c: boolean) => boolean)) => void;
}

export function useFold(): Fold {
  const [collapsed, setCollapsed] = useState(false);
  return { headingId: useId(), bodyId: useId(), collapsed, setCollapsed };
}

/**
 * The header of a collapsible side section (Batches, Files): a toggle that names the section,
 * then whatever the section puts beside it (a count, actions).
 */
export function CollapsibleHeader({
  title,
  fold: { headingId, bodyId, collapsed, setCollapsed },
  className = "",
  children,
}: {
  title: string;
  fold: Fold;
  className?: string;
  children?: ReactNode;
}) {
  return (
    <header className={`flex min-h-12 flex-wrap items-center gap-2 border-zinc-200 px-4 py-2 ${className}`}>
      <button
        type="button"
        aria-expanded={!collapsed}
        aria-controls={bodyId}
        onClick={() => setCollapsed((c) => !c)}
        className="-ml-1 inline-flex items-center gap-1 rounded px-1 py-0.5 focus-visible:outline-2 focus-visible:outline-sky-600"
      >
        <svg aria-hidden viewBox="0 0 16 16" className={`size-4 transition-transform ${collapsed ? "-rotate-90" : ""}`}>
          <path d="M4 6l4 4 4-4" fill="none" stroke="currentColor" strokeWidth="1.75" />
        </svg>
        <h2 id={headingId} className="text-base font-semibold">
          {title}
        </h2>
      </button>
      {children}
    </header>
  );
}

/** A small rounded counter beside a section title ("2 active", "3 files · 4 KB"). */
export function CountPill({ testId, children }: { testId?: string; children: ReactNode }) {
  return (
    <span data-testid={testId} className="rounded-full bg-zinc-100 px-2 py-0.5 text-xs font-medium text-zinc-700 tabular-nums">
      {children}
    </span>
  );
}
