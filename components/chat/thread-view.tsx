"use client";

import { BatchPanel } from "@/components/batches/panel";
import { FilesSection } from "@/components/files/section";
import { Badge } from "@/components/ui/badge";
import type { ChatMessage } from "@/server/chat/messages";
import { Chat } from "./chat";
import { useThreads } from "./threads-api";

/**
 * A thread: header, chat, and the batch panel on the right (below the chat on narrow
 * windows). The panel slot disappears entirely while the panel renders nothing.
 */
export function ThreadView({
  thread,
  initialMessages,
  model,
}: {
  thread: { id: string; title: string };
  initialMessages: ChatMessage[];
  model: { name: string; simulator: boolean };
}) {
  // The sidebar's thread list carries the current title (the first message renames the thread).
  const { data } = useThreads();
  const title = data?.threads.find((t) => t.id === thread.id)?.title ?? thread.title;

  return (
    <div className="flex min-h-0 flex-1 flex-col lg:flex-row">
      <section aria-label="Chat" className="flex min-h-0 min-w-0 flex-1 flex-col">
        <header className="flex h-14 shrink-0 items-center gap-3 border-b border-zinc-200 bg-white px-4">
          <h1 className="min-w-0 flex-1 truncate text-sm font-semibold">{title}</h1>
          {model.simulator ? (
            <Badge tone="amber" title="No model endpoint is configured; the built-in simulator answers.">
              Simulator
            </Badge>
          ) : (
            <Badge title="Model">{model.name}</Badge>
          )}
        </header>
        <Chat threadId={thread.id} initialMessages={initialMessages} />
      </section>
      <div className="max-h-[45vh] shrink-0 overflow-y-auto border-t border-zinc-200 bg-white empty:hidden lg:max-h-none lg:w-[26rem] lg:border-t-0 lg:border-l">
        <BatchPanel threadId={thread.id} />
        <FilesSection threadId={thread.id} />
      </div>
    </div>
  );
}
