"use client";

import { useChat } from "@ai-sdk/react";
import { useQueryClient } from "@tanstack/react-query";
import { DefaultChatTransport } from "ai";
import { useEffect, useMemo, useRef, useState } from "react";
import { filesKey } from "@/components/files/api";
import { useAttachFiles } from "@/components/files/attach";
import { useBatchPanelRequests } from "@/components/batches/panel-state";
import { Badge } from "@/components/ui/badge";
import { Button } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";
import { CHAT_MAX_TEXT_CHARS, THREAD_BUSY_MESSAGE, tooLongMessage } from "@/lib/api/chat";
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

/** One example per way of working, in the simulator's phrasings (a real model understands them too). */
export const EXAMPLE_PROMPTS = [
  { label: "Ask directly", text: "What can you do?" },
  { label: "One sub-agent (task)", text: "task: list three surprising facts about tides" },
  { label: "A swarm in parallel", text: "swarm: Write one line about {{item}} | the sea; the moon; the wind" },
  { label: "A durable batch", text: "batch: Summarize the history of {{item}} | Lisbon; Nairobi; Osaka; Lima; Oslo" },
] as const;

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
    <article data-role="assistant" aria-label="Lead agent message" aria-busy={streaming} className="min-w-0 space-y-1.5">
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

/** The first minute of a thread: what the agent can do, as buttons that fill the composer. */
function EmptyState({ threadId, onPick }: { threadId: string; onPick: (text: string) => void }) {
  const [noWorker, setNoWorker] = useState(false);
  const { openNewBatch } = useBatchPanelRequests(threadId);
  return (
    <section aria-label="Get started" className="mx-auto max-w-xl py-10 text-center">
      <p className="font-medium text-zinc-800">New conversation</p>
      <p className="mt-1 text-sm text-zinc-500">
        Ask anything. The lead agent answers directly, or hands work to one sub-agent, a parallel swarm, or a durable
        batch that runs in the background. Try one:
      </p>
      <ul className="mt-5 grid grid-cols-1 gap-2 text-left sm:grid-cols-2">
        {EXAMPLE_PROMPTS.map((p) => (
          <li key={p.label} className="min-w-0">
            <button
              type="button"
              data-testid="example-prompt"
              onClick={() => onPick(p.text)}
              className="h-full w-full min-w-0 overflow-hidden rounded-xl border border-zinc-200 bg-white px-3 py-2 text-left shadow-xs hover:border-zinc-300 hover:bg-zinc-50 focus-visible:outline-2 focus-visible:outline-sky-600"
            >
              <span className="block text-xs font-medium text-zinc-500">{p.label}</span>
              <span className="mt-0.5 block truncate font-mono text-[13px] text-zinc-800" title={p.text}>
                {p.text}
              </span>
            </button>
          </li>
        ))}
        <li className="min-w-0 sm:col-span-2">
          <button
            type="button"
            data-testid="example-new-batch"
            onClick={() => setNoWorker(!openNewBatch())}
            className="w-full rounded-xl border border-dashed border-zinc-300 bg-white px-3 py-2 text-left hover:bg-zinc-50 focus-visible:outline-2 focus-visible:outline-sky-600"
          >
            <span className="block text-xs font-medium text-zinc-500">From a file</span>
            <span className="mt-0.5 block text-[13px] text-zinc-800">New batch from a file (CSV, JSONL or one item per line)…</span>
          </button>
          {noWorker ? (
            <p role="status" className="mt-1 text-xs text-amber-800">
              Batches need a worker: start one with <code className="font-mono">npm run worker</code>, then try again.
            </p>
          ) : null}
        </li>
      </ul>
    </section>
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
        // A response keeps running on the server across reloads; reattach to it (204 when none runs).
        prepareReconnectToStreamRequest: () => ({ api: `/api/threads/${threadId}/chat/stream` }),
      }),
    [threadId],
  );
  const [input, setInput] = useState("");
  const [notice, setNotice] = useState<string | null>(null);
  // The text of the message in flight, given back to the composer if it is refused.
  const sent = useRef<{ id: string; text: string } | null>(null);
  // The first reattach check: a message sent before it ends waits for it (both would race for the stream).
  const attached = useRef<Promise<void> | null>(null);
  const resumeRef = useRef<() => Promise<void>>(async () => {});
  const { messages, setMessages, sendMessage, resumeStream, status, stop, error, clearError } = useChat<ChatMessage>({
    id: threadId,
    messages: initialMessages,
    transport,
    experimental_throttle: 40,
    onFinish: () => {
      sent.current = null;
      void queryClient.invalidateQueries({ queryKey: THREADS_KEY });
      // The run's tools (and its sub-agents') may have written files.
      void queryClient.invalidateQueries({ queryKey: filesKey(threadId) });
    },
    onError: () => {
      const failed = sent.current;
      sent.current = null;
      if (!failed) return;
      // The server stored nothing of a refused message (409, 4xx): take it out of the
      // transcript and give its text back, unless something new was typed meanwhile.
      setMessages((ms) => ms.filter((m) => m.id !== failed.id));
      setInput((current) => (current.trim() === "" ? failed.text : current));
    },
  });
  resumeRef.current = resumeStream;
  const attach = useAttachFiles(threadId);

  // Reattach to a response still running on the server (after a reload, or in another tab);
  // the server answers 204 when none runs. Once per mount.
  useEffect(() => {
    attached.current ??= resumeRef.current().catch(() => {});
  }, []);

  // Refused because this thread is busy (another tab sent first): keep saying why, load what
  // was stored meanwhile and follow the running response here.
  useEffect(() => {
    if (status !== "error" || !error || errorMessage(error) !== THREAD_BUSY_MESSAGE) return;
    setNotice(THREAD_BUSY_MESSAGE);
    void (async () => {
      const res = await fetch(`/api/threads/${threadId}`, { cache: "no-store" });
      if (res.ok) setMessages(((await res.json()) as { messages: ChatMessage[] }).messages);
      await resumeRef.current();
    })();
  }, [status, error, threadId, setMessages]);
  const busy = status === "submitted" || status === "streaming";
  // The lead's replies to settled batches arrive without a request of this tab.
  useWakeupMessages({ threadId, messages, idle: !busy, append: (fresh) => {
      setMessages((prev) => [...prev, ...fresh]);
      // A wake-up reply is a run too: its tools may have written files.
      void queryClient.invalidateQueries({ queryKey: filesKey(threadId) });
    },
  });

  // Follow the stream while the reader is at the bottom; leave them alone when they scrolled up.
  const scroller = useRef<HTMLDivElement>(null);
  const composer = useRef<HTMLTextAreaElement>(null);
  const pinned = useRef(true);
  // biome-ignore lint/correctness/useExhaustiveDependencies: re-run whenever the transcript changes
  useEffect(() => {
    const el = scroller.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  }, [messages, status]);

  const tooLong = input.length > CHAT_MAX_TEXT_CHARS;

  function submit() {
    const text = input.trim();
    if (!text || busy) return;
    if (text.length > CHAT_MAX_TEXT_CHARS) {
      setNotice(tooLongMessage(text.length));
      return;
    }
    clearError();
    setNotice(null);
    pinned.current = true;
    const id = `u_${crypto.randomUUID().replace(/-/g, "")}`;
    sent.current = { id, text: input };
    setInput("");
    void (attached.current ?? Promise.resolve()).then(() => sendMessage({ id, role: "user", parts: [{ type: "text", text }] }));
    // The first message titles the thread; refresh the sidebar shortly after it is stored.
    setTimeout(() => void queryClient.invalidateQueries({ queryKey: THREADS_KEY }), 500);
  }

  async function onStop() {
    const target = [...messages].reverse().find((m) => m.role === "assistant");
    await stopLeadRun(threadId, target, stop);
    // The stream was cut before the server's final status arrived: show "Stopped" now.
    if (target)
      setMessages((ms) =>
        ms.map((m) => (m.id === target.id ? { ...m, metadata: { ...m.metadata, status: "cancelled" } } : m)),
      );
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
            <EmptyState
              threadId={threadId}
              onPick={(text) => {
                setInput(text);
                composer.current?.focus();
              }}
            />
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
          {error && errorMessage(error) !== notice && (
            <div role="alert" className="rounded-lg border border-red-200 bg-red-50 px-3 py-2 text-sm text-red-700">
              {errorMessage(error)}
            </div>
          )}
        </div>
      </div>
      <form
        data-testid="composer"
        className="shrink-0 border-t border-zinc-200 bg-white/80 px-4 py-3 backdrop-blur"
        onSubmit={(e) => {
          e.preventDefault();
          submit();
        }}
      >
        {attach.status}
        <div className="mx-auto w-full max-w-3xl">
          {(notice || tooLong) && (
            <p role="alert" data-testid="composer-notice" className="mb-2 text-sm text-red-700">
              {notice ?? tooLongMessage(input.length)}
            </p>
          )}
          <div className="flex items-end gap-2">
            {attach.button}
            <textarea
              ref={composer}
              aria-label="Message"
              aria-invalid={tooLong || undefined}
              value={input}
              onChange={(e) => {
                setInput(e.target.value);
                if (notice) setNotice(null);
              }}
              onKeyDown={(e) => {
                if (e.key === "Enter" && !e.shiftKey && !e.nativeEvent.isComposing) {
                  e.preventDefault();
                  submit();
                }
              }}
              rows={Math.min(8, Math.max(1, input.split("\n").length))}
              placeholder="Message the lead agent…"
              title="Enter sends, Shift+Enter starts a new line"
              className="max-h-60 min-h-10 min-w-0 flex-1 resize-none rounded-xl border border-zinc-300 bg-white px-3 py-2 text-[15px] shadow-xs placeholder:text-zinc-400 focus:border-zinc-500 focus:ring-2 focus:ring-zinc-200 focus:outline-none"
            />
            {busy ? (
              <Button variant="secondary" onClick={() => void onStop()}>
                <span aria-hidden="true" className="inline-block size-2.5 rounded-[2px] bg-zinc-700" />
                Stop
              </Button>
            ) : (
              <Button type="submit" disabled={!input.trim() || tooLong}>
                Send
              </Button>
            )}
          </div>
        </div>
      </form>
    </div>
  );
}
