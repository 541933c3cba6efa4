"use client";

import { type ReactNode, useState } from "react";

/** Longer than this, a finished text shows its beginning and a "Show more" button. */
export const LONG_TEXT_CHARS = 4_000;
const PREVIEW_CHARS = 1_500;

/**
 * A very long message (a pasted document, a 50,000-character answer) would fill screens of
 * the thread and push its newest content far down: show its beginning, collapsed, with a
 * button for the rest. A text still streaming stays whole, so the reader sees it arrive.
 */
export function LongText({
  text,
  streaming,
  render,
}: {
  text: string;
  streaming: boolean;
  render: (text: string) => ReactNode;
}) {
  const [expanded, setExpanded] = useState(false);
  if (streaming || text.length <= LONG_TEXT_CHARS) return render(text);
  const cut = text.lastIndexOf(" ", PREVIEW_CHARS);
  const preview = `${text.slice(0, cut > PREVIEW_CHARS / 2 ? cut : PREVIEW_CHARS)}…`;
  const more = (text.length - preview.length + 1).toLocaleString("en-US");
  return (
    <div data-testid="long-text" data-expanded={expanded}>
      {render(expanded ? text : preview)}
      <button
        type="button"
        aria-expanded={expanded}
        onClick={() => setExpanded((e) => !e)}
        className="mt-1 rounded text-sm font-medium underline underline-offset-4 opacity-80 hover:opacity-100 focus-visible:outline-2 focus-visible:outline-sky-600"
      >
        {expanded ? "Show less" : `Show more (${more} more characters)`}
      </button>
    </div>
  );
}
