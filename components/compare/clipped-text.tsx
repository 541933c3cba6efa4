"use client";

import { useId, useState } from "react";

/** Past this many characters (or lines) a cell shows its start and "Show all". */
const CLIP_CHARS = 280;
const CLIP_LINES = 6;

/** A JSON value as indented JSON, a string as its text: what a cell of the comparison shows. */
export function valueText(value: unknown): string {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  return JSON.stringify(value, null, 2);
}

function clip(text: string): string | null {
  const lines = text.split("\n");
  if (text.length <= CLIP_CHARS && lines.length <= CLIP_LINES) return null;
  const head = lines.slice(0, CLIP_LINES).join("\n");
  return `${head.length > CLIP_CHARS ? head.slice(0, CLIP_CHARS) : head}…`;
}

/**
 * Model, tool or person text, clipped with "Show all" when long. Always text (React escapes it),
 * never markup: an output that looks like HTML is shown as the characters it is.
 */
export function ClippedText({ text, mono = false, empty = "—", testId }: { text: string; mono?: boolean; empty?: string; testId?: string }) {
  const [open, setOpen] = useState(false);
  const id = useId();
  if (text === "") return <span className="text-zinc-400">{empty}</span>;
  const clipped = clip(text);
  return (
    <div className="min-w-0">
      <pre
        id={id}
        data-testid={testId}
        data-clipped={clipped !== null && !open ? "true" : undefined}
        className={`whitespace-pre-wrap wrap-anywhere ${mono ? "font-mono text-[11px]" : "font-sans text-xs"}`}
      >
        {open || clipped === null ? text : clipped}
      </pre>
      {clipped !== null ? (
        <button
          type="button"
          aria-expanded={open}
          aria-controls={id}
          onClick={() => setOpen((o) => !o)}
          className="mt-0.5 text-[11px] font-medium text-sky-800 underline-offset-2 hover:underline focus-visible:outline-2 focus-visible:outline-sky-600"
        >
          {open ? "Show less" : `Show all (${text.length.toLocaleString("en-US")} characters)`}
        </button>
      ) : null}
    </div>
  );
}
