"use client";

import { useId, useLayoutEffect, useRef, useState } from "react";
import type { CheckResult } from "@/lib/api/batch-data";

/**
 * One check's outcome in a results cell: ✓ or ✗. When the check says why (a reason, a judge's
 * score), the mark is a button whose description is the reason: it shows in a popover on hover,
 * on keyboard focus and on a tap, in the top layer so the table's scroll box never clips it,
 * and placed inside the window (readable on a phone).
 */
export function CheckMark({ result }: { result: CheckResult | undefined }) {
  if (!result) return <span className="text-zinc-400">—</span>;
  const word = result.passed ? "passed" : "failed";
  const mark = (
    <span aria-hidden className={`font-semibold ${result.passed ? "text-emerald-700" : "text-red-700"}`}>
      {result.passed ? "✓" : "✗"}
    </span>
  );
  const why = checkReason(result);
  if (!why)
    return (
      <span data-testid="check-cell" data-passed={result.passed} className="inline-flex">
        {mark}
        <span className="sr-only">{word}</span>
      </span>
    );
  return <ReasonButton result={result} word={word} mark={mark} why={why} />;
}

const supportsPopover = () => typeof HTMLElement !== "undefined" && "showPopover" in HTMLElement.prototype;

/** Why a check came out as it did: its score (a judge's) and its reason, or "" when it says nothing. */
export function checkReason(result: CheckResult): string {
  const score = result.score === undefined ? "" : `score ${Number.isInteger(result.score) ? result.score : result.score.toFixed(2)}`;
  return [score, result.reason ?? ""].filter(Boolean).join(" · ");
}

/** Each check's outcome with its reason in full, one a line (an item's detail, the review page). */
export function CheckList({ checks, itemTestId, className = "" }: { checks: readonly CheckResult[]; itemTestId: string; className?: string }) {
  return (
    <ul className={`flex flex-col gap-0.5 ${className}`}>
      {checks.map((c) => (
        <li key={c.name} data-testid={itemTestId} data-passed={c.passed} className="flex min-w-0 gap-1.5">
          <span aria-hidden className={`font-semibold ${c.passed ? "text-emerald-700" : "text-red-700"}`}>
            {c.passed ? "✓" : "✗"}
          </span>
          <span className="min-w-0 wrap-anywhere">
            <span className="font-mono font-medium text-zinc-900">{c.name}</span>{" "}
            <span className="text-zinc-600">
              {c.passed ? "passed" : "failed"}
              {checkReason(c) ? ` · ${checkReason(c)}` : ""}
            </span>
          </span>
        </li>
      ))}
    </ul>
  );
}

function ReasonButton({ result, word, mark, why }: { result: CheckResult; word: string; mark: React.ReactNode; why: string }) {
  const id = useId();
  const button = useRef<HTMLButtonElement>(null);
  const tip = useRef<HTMLSpanElement>(null);
  const [open, setOpen] = useState(false);

  // Placed below the mark (above it near the bottom edge), kept inside the window.
  useLayoutEffect(() => {
    const el = tip.current;
    const anchor = button.current;
    // Without the Popover API (older browsers) the reason stays the button's description and title.
    if (!el || !anchor || typeof el.showPopover !== "function") return;
    if (!open) {
      if (el.matches(":popover-open")) el.hidePopover();
      return;
    }
    if (!el.matches(":popover-open")) el.showPopover();
    const a = anchor.getBoundingClientRect();
    const t = el.getBoundingClientRect();
    const vw = document.documentElement.clientWidth;
    const vh = document.documentElement.clientHeight;
    const left = Math.min(Math.max(8, a.left + a.width / 2 - t.width / 2), Math.max(8, vw - t.width - 8));
    const below = a.bottom + 6;
    const top = below + t.height > vh - 8 ? Math.max(8, a.top - t.height - 6) : below;
    el.style.left = `${left}px`;
    el.style.top = `${top}px`;
  }, [open]);

  return (
    <>
      <button
        ref={button}
        type="button"
        data-testid="check-cell"
        data-passed={result.passed}
        aria-describedby={id}
        title={supportsPopover() ? undefined : why}
        onMouseEnter={() => setOpen(true)}
        onMouseLeave={() => setOpen(false)}
        onFocus={() => setOpen(true)}
        onBlur={() => setOpen(false)}
        // A tap opens it too (a tap elsewhere blurs it closed).
        onClick={() => setOpen(true)}
        onKeyDown={(e) => {
          if (e.key === "Escape") setOpen(false);
        }}
        className="inline-flex items-center gap-1 rounded px-1 underline decoration-dotted underline-offset-2 focus-visible:outline-2 focus-visible:outline-sky-600"
      >
        {mark}
        <span className="sr-only">{`${result.name} ${word}`}</span>
      </button>
      <span
        ref={tip}
        id={id}
        role="tooltip"
        popover="manual"
        data-testid="check-reason"
        className="fixed m-0 border-0 max-w-[min(20rem,calc(100vw-1rem))] rounded-md bg-zinc-900 px-2 py-1 text-xs leading-snug text-white shadow-lg wrap-anywhere whitespace-pre-wrap [inset:auto]"
      >
        {why}
      </span>
    </>
  );
}
