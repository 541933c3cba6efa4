import Link from "next/link";
import type { ReactNode } from "react";
import { ThreadsMenuButton } from "@/components/chat/threads-drawer";

/**
 * A batch's page of its own (its results at full width, a comparison): a header with the way back
 * to its thread and the page's title, then the page, which scrolls under the header.
 */
export function BatchPageFrame({ thread, title, children }: { thread: { id: string; title: string }; title: ReactNode; children: ReactNode }) {
  return (
    <div className="flex min-h-0 flex-1 flex-col">
      <header data-page-header="" className="flex min-h-12 shrink-0 items-center gap-2 border-b border-zinc-200 bg-white px-3 py-1.5 md:min-h-14 md:gap-3 md:px-4">
        <ThreadsMenuButton className="-ml-1" />
        <div className="min-w-0 flex-1">
          <Link
            href={`/threads/${thread.id}`}
            className="flex max-w-full items-center gap-1 text-xs text-sky-800 underline-offset-2 hover:underline focus-visible:outline-2 focus-visible:outline-sky-600"
          >
            <span aria-hidden>←</span>
            <span className="truncate">Back to {thread.title}</span>
          </Link>
          <h1 className="truncate text-sm font-semibold">{title}</h1>
        </div>
      </header>
      <div className="min-h-0 flex-1 overflow-y-auto px-3 py-3 md:px-6 md:py-4">{children}</div>
    </div>
  );
}
