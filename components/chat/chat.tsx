"use client";

import { useChat } from "@ai-sdk/react";
import { useQueryClient } from "@tanstack/react-query";
import { DefaultChatTransport } from "ai";
import { useEffect, useMemo, useRef, useState } from "react";
import { useAttachFiles } from "@/components/files/attach";
import { Badge } from "@/components/ui/badge";
import { Button } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";
import type { ChatMessage } from "@/server/chat/messages";
import { MessageParts } from "./message-parts";
import { StopReport, stopLeadRun } from "./subagent-card";
import { THREADS_KEY } from "./threads-api";
import { useWakeupMessages } from "@/components/batches/notifications";

/** useChat throws the response body as the message; show the API's `error.message` when it is one. */
function errorMessage(error: Error): string {
  try {
    const body = JSON.parse(error.message);
    if (typeof body?.error?.message === "string") return body.error.message;
  } catch {
    // plain text
  }
  return error.message || "Something went wrong.";
}

function MessageView({ message, threadId, streaming }: { message: ChatMessage; threadId: string; streaming: boolean }) {
  if (message.role === "user") {
    return (
      <article data-role="user" aria-label="Your message" className="flex justify-end">
        <div className="max-w-[85%] rounded-2xl rounded-br-md bg-zinc-900 px-4 py-2.5 text-white shadow-xs">
          <MessageParts message={message} threadId={threadId} streaming={false} />
        </div>
      </article>
    );
  }
  const status = message.metadata?.status;
  return (
    <article data-role="assistant" aria-label="Lead agent message" aria-busy={streaming} className="space-y-1.5">
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

export function Chat({ threadId, initialMessages }: { threadId: string; initialMessages: ChatMessage[] }) {
  const queryClient = useQueryClient();
  const transport = useMemo(
    () =>
      new DefaultChatTransport<ChatMessage>({
        api: `/api/threads/${threadId}/chat`,
        // The server keeps the history; send only the new message.
        prepareSendMessagesRequest: ({ messages }) => ({ body: { message: messages[messages.length - 1] } }),
      }),
    [threadId],
  );
  const { messages, setMessages, sendMessage, status, stop, error, clearError } = useChat<ChatMessage>({
    id: threadId,
    messages: initialMessages,
    transport,
    experimental_throttle: 40,
    onFinish: () => void queryClient.invalidateQueries({ queryKey: THREADS_KEY }),
  });
  const [input, setInput] = useState("");
  const attach = useAttachFiles(threadId);
  const busy = status === "submitted" || status === "streaming";
  // The lead's replies to settled batches arrive without a request of this tab.
  useWakeupMessages({ threadId, messages, idle: !busy, append: (fresh) => setMessages((prev) => [...prev, ...fresh]) });

  // Follow the stream while the reader is at the bottom; leave them alone when they scrolled up.
  const scroller = useRef<HTMLDivElement>(null);
  const pinned = useRef(true);
  // biome-ignore lint/correctness/useExhaustiveDependencies: re-run whenever the transcript changes
  useEffect(() => {
    const el = scroller.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  }, [messages, status]);

  function submit() {
    const text = input.trim();
    if (!text || busy) return;
    clearError();
    pinned.current = true;
    setInput("");
    void sendMessage({ text });
    // The first message titles the thread; refresh the sidebar shortly after it is stored.
    setTimeout(() => void queryClient.invalidateQueries({ queryKey: THREADS_KEY }), 500);
  }

  const last = messages[messages.length - 1];

  return (
    <div className="relative flex min-h-0 flex-1 flex-col" {...attach.dropTarget}>
      {attach.overlay}
      <div
        ref={scroller}
        onScroll={(e) => {
          const el = e.currentTarget;
          pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
        }}
        className="min-h-0 flex-1 overflow-y-auto"
      >
        <div className="mx-auto w-full max-w-3xl space-y-6 px-4 py-6">
          {messages.length === 0 && (
            <div className="py-16 text-center text-sm text-zinc-500">
              <p className="font-medium text-zinc-700">New conversation</p>
              <p className="mt-1">Ask for something. Large or parallel work gets delegated to sub-agents.</p>
            </div>
          )}
          {messages.map((m) => (
            <MessageView
              key={m.id}
              message={m}
              threadId={threadId}
              streaming={status === "streaming" && m === last && m.role === "assistant"}
            />
          ))}
          {status === "submitted" && (
            <div className="flex items-center gap-2 text-sm text-zinc-500" role="status">
              <Spinner className="size-3" /> Thinking…
            </div>
          )}
          {error && (
            <div role="alert" className="rounded-lg border border-red-200 bg-red-50 px-3 py-2 text-sm text-red-700">
              {errorMessage(error)}
            </div>
          )}
        </div>
      </div>
      <form
        className="border-t border-zinc-200 bg-white/80 px-4 py-3 backdrop-blur"
        onSubmit={(e) => {
          e.preventDefault();
          submit();
        }}
      >
        {attach.status}
        <div className="mx-auto flex w-full max-w-3xl items-end gap-2">
          {attach.button}
          <textarea
            aria-label="Message"
            value={input}
            onChange={(e) => setInput(e.target.value)}
            onKeyDown={(e) => {
              if (e.key === "Enter" && !e.shiftKey && !e.nativeEvent.isComposing) {
                e.preventDefault();
                submit();
              }
            }}
            rows={Math.min(8, Math.max(1, input.split("\n").length))}
            placeholder="Message the lead agent…"
            title="Enter sends, Shift+Enter starts a new line"
            className="max-h-60 min-h-10 flex-1 resize-none rounded-xl border border-zinc-300 bg-white px-3 py-2 text-[15px] shadow-xs placeholder:text-zinc-400 focus:border-zinc-500 focus:ring-2 focus:ring-zinc-200 focus:outline-none"
          />
          {busy ? (
            <Button variant="secondary" onClick={() => void stopLeadRun(threadId, last, stop)}>
              <span aria-hidden="true" className="inline-block size-2.5 rounded-[2px] bg-zinc-700" />
              Stop
            </Button>
          ) : (
            <Button type="submit" disabled={!input.trim()}>
              Send
            </Button>
          )}
        </div>
      </form>
    </div>
  );
}
