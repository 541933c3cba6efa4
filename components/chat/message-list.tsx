"use client";

import { type ReactNode, type RefObject, useCallback, useEffect, useLayoutEffect, useRef, useState } from "react";
import { SubmittedBatchCard } from "@/components/batches/receipt-card";
import { Badge } from "@/components/ui/badge";
import { Spinner } from "@/components/ui/spinner";
import type { ChatMessage } from "@/lib/api/chat";
import { MessageParts } from "./message-parts";
import { StopReport } from "./subagent-card";

/** Closer than this to the bottom counts as "at the newest message". */
const PINNED_SLACK_PX = 80;

/**
 * Keeps a scroll box at its bottom: on opening (before the first paint), whenever its content
 * grows (a streamed delta, a card that loaded) while the reader is at the bottom, and on
 * request. Scrolling up releases it; scrolling back down, or `toBottom`, pins it again.
 */
export function useStickToBottom(): {
  scroller: RefObject<HTMLDivElement | null>;
  content: RefObject<HTMLDivElement | null>;
  atBottom: boolean;
  toBottom: () => void;
} {
  const scroller = useRef<HTMLDivElement>(null);
  const content = useRef<HTMLDivElement>(null);
  const pinned = useRef(true);
  const lastTop = useRef(0);
  const [atBottom, setAtBottom] = useState(true);

  const toBottom = useCallback(() => {
    const el = scroller.current;
    pinned.current = true;
    setAtBottom(true);
    if (el) el.scrollTop = el.scrollHeight;
  }, []);

  useLayoutEffect(() => toBottom(), [toBottom]);

  useEffect(() => {
    const el = scroller.current;
    const inner = content.current;
    if (!el || !inner) return;
    const onScroll = () => {
      const distance = el.scrollHeight - el.scrollTop - el.clientHeight;
      // Only a move up releases the pin: content growing under a pinned reader moves nothing up.
      if (el.scrollTop < lastTop.current - 1 && distance > PINNED_SLACK_PX) pinned.current = false;
      else if (distance <= PINNED_SLACK_PX) pinned.current = true;
      lastTop.current = el.scrollTop;
      setAtBottom(pinned.current);
    };
    const observer = new ResizeObserver(() => {
      if (pinned.current) el.scrollTop = el.scrollHeight;
    });
    el.addEventListener("scroll", onScroll, { passive: true });
    observer.observe(inner);
    observer.observe(el);
    return () => {
      el.removeEventListener("scroll", onScroll);
      observer.disconnect();
    };
  }, []);

  return { scroller, content, atBottom, toBottom };
}

/** A message sent while a response ran: it waits its turn, after the conversation, marked Queued. */
function QueuedMessageView({ message, threadId }: { message: ChatMessage; threadId: string }) {
  // A message the server already started (the thread was free after all) has no mark while it joins the conversation.
  const waiting = message.metadata?.queued === true;
  return (
    <article data-role="user" data-queued={waiting ? "" : undefined} aria-label={waiting ? "Your message, queued" : "Your message"} className="flex flex-col items-end gap-1">
      <div className="max-w-[85%] min-w-0 rounded-2xl rounded-br-md border border-dashed border-zinc-400 bg-zinc-50 px-4 py-2.5 text-zinc-800">
        <MessageParts message={message} threadId={threadId} streaming={false} />
      </div>
      {waiting && (
        <span title="The lead agent answers it when the replies before it are done">
          <Badge>
            <span aria-hidden="true" className="inline-block size-1.5 rounded-full bg-zinc-400" />
            Queued
          </Badge>
        </span>
      )}
    </article>
  );
}

function MessageView({ message, threadId, streaming }: { message: ChatMessage; threadId: string; streaming: boolean }) {
  // A batch the person started from the New batch dialog: its receipt card, on their side.
  const submitted = message.role === "user" ? message.metadata?.submitted_batch : undefined;
  if (submitted) {
    return (
      <article data-role="user" aria-label="Your batch" className="flex flex-col items-end gap-1">
        <span className="text-xs text-zinc-500">You started a batch</span>
        <div className="w-full max-w-md">
          <SubmittedBatchCard batchId={submitted.id} total={submitted.total} threadId={threadId} />
        </div>
      </article>
    );
  }
  if (message.role === "user") {
    return (
      <article data-role="user" aria-label="Your message" className="flex justify-end">
        <div className="max-w-[85%] min-w-0 rounded-2xl rounded-br-md bg-zinc-900 px-4 py-2.5 text-white shadow-xs">
          <MessageParts message={message} threadId={threadId} streaming={false} />
        </div>
      </article>
    );
  }
  const status = message.metadata?.status;
  return (
    <article
      id={`message-${message.id}`}
      data-role="assistant"
      aria-label="Lead agent message"
      aria-busy={streaming}
      className="min-w-0 scroll-mt-4 space-y-1.5"
    >
      <div className="flex items-center gap-2 text-xs font-medium text-zinc-500">
        <span>Lead agent</span>
        {streaming && <Spinner className="size-3 text-zinc-400" />}
        {!streaming && status === "cancelled" && <Badge>Stopped</Badge>}
        {!streaming && status === "failed" && <Badge tone="red">Failed</Badge>}
      </div>
      <div className="text-[15px] text-zinc-800">
        <MessageParts message={message} threadId={threadId} streaming={streaming} />
      </div>
      <StopReport threadId={threadId} runId={message.metadata?.runId} cancelled={status === "cancelled"} />
    </article>
  );
}

/** "Thinking…" before the first token, and why the last request failed. */
function ChatStatus({ thinking, error }: { thinking: boolean; error: string | null }) {
  return (
    <>
      {thinking && (
        <div className="flex items-center gap-2 text-sm text-zinc-500" role="status">
          <Spinner className="size-3" /> Thinking…
        </div>
      )}
      {error && (
        <div role="alert" className="rounded-lg border border-red-200 bg-red-50 px-3 py-2 text-sm text-red-700">
          {error}
        </div>
      )}
    </>
  );
}

/**
 * The transcript: opens at the newest message and follows a streaming reply while the reader
 * is at the bottom; a reader who scrolled up is left alone and offered "Jump to latest".
 */
export function MessageList({
  threadId,
  messages,
  queued,
  streamingId,
  thinking,
  error,
  empty,
  follow,
}: {
  threadId: string;
  messages: ChatMessage[];
  /** Messages waiting for the thread, in order: shown after the conversation. */
  queued: ChatMessage[];
  /** The assistant message still streaming, if any. */
  streamingId: string | null;
  thinking: boolean;
  error: string | null;
  /** Shown when there are no messages yet. */
  empty: ReactNode;
  /** Changes when the person sends: the list jumps to the bottom to show their message. */
  follow: number;
}) {
  const { scroller, content, atBottom, toBottom } = useStickToBottom();
  useEffect(() => {
    if (follow > 0) toBottom();
  }, [follow, toBottom]);

  return (
    <div className="relative flex min-h-0 flex-1 flex-col">
      <div ref={scroller} data-testid="transcript" className="min-h-0 flex-1 overflow-y-auto [overflow-anchor:none]">
        <div ref={content} className="mx-auto w-full max-w-3xl space-y-6 px-4 py-6">
          {messages.length === 0 && queued.length === 0 && empty}
          {messages.map((m) => (
            <MessageView key={m.id} message={m} threadId={threadId} streaming={m.id === streamingId} />
          ))}
          <ChatStatus thinking={thinking} error={error} />
          {queued.map((m) => (
            <QueuedMessageView key={m.id} message={m} threadId={threadId} />
          ))}
        </div>
      </div>
      {atBottom ? null : (
        <button
          type="button"
          onClick={toBottom}
          className="absolute bottom-3 left-1/2 z-10 inline-flex -translate-x-1/2 items-center gap-1 rounded-full border border-zinc-200 bg-white px-3 py-1.5 text-xs font-medium text-zinc-700 shadow-md hover:bg-zinc-50 focus-visible:outline-2 focus-visible:outline-sky-600"
        >
          <span aria-hidden="true">↓</span> Jump to latest
        </button>
      )}
    </div>
  );
}
