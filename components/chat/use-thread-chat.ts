"use client";

import { useChat } from "@ai-sdk/react";
import { useQueryClient } from "@tanstack/react-query";
import { DefaultChatTransport, readUIMessageStream } from "ai";
import { useEffect, useMemo, useRef, useState } from "react";
import { fetchThreadMessages } from "@/components/batches/api";
import { useWakeupMessages } from "@/components/batches/notifications";
import { useChatLookRequests } from "@/components/batches/panel-state";
import { filesKey } from "@/components/files/api";
import { queuedMessageSchema, THREAD_BUSY_MESSAGE } from "@/lib/api/chat";
import type { ChatMessage } from "@/lib/api/chat";
import { stopLeadRun } from "./subagent-card";
import { THREADS_KEY } from "./threads-api";
import { useFollowDecidedApprovals } from "./use-approval-follow";

/** useChat throws the response body as the message; show the API's `error.message` when it is one. */
export function chatErrorMessage(error: Error): string {
  try {
    const body = JSON.parse(error.message);
    if (typeof body?.error?.message === "string") return body.error.message;
  } catch {
    // plain text
  }
  return error.message || "Something went wrong.";
}

/** A user message waiting for the thread's running response (stored with metadata.queued). */
const isQueued = (m: ChatMessage) => m.metadata?.queued === true;
/** How often a tab with queued messages asks whether the next one started. */
const QUEUE_POLL_MS = 1_000;

/**
 * One thread's conversation with the lead agent: the AI SDK chat over this thread's
 * endpoints, reattached to a response still running on the server, following another tab's
 * running response when this one is refused as busy, receiving the lead's wake-up replies,
 * and messages sent while a response runs: queued on the server, shown after the
 * conversation, and followed (their response streamed here) when their turn comes.
 */
export function useThreadChat(
  threadId: string,
  initialMessages: ChatMessage[],
  events: {
    /** A refused message's text, for the composer to give back. */
    onRefused: (text: string) => void;
    /** Refused because another tab's response runs in this thread. */
    onBusy: () => void;
    /** Why a message sent while busy was refused. */
    onQueueRefused: (reason: string) => void;
  },
) {
  const queryClient = useQueryClient();
  // The message in flight, given back to the composer if it is refused.
  const sent = useRef<{ message: ChatMessage; text: string; answered: () => void } | null>(null);
  // Messages reach the server in the order they were sent: each POST waits until the one before
  // it was answered (a queued one must never overtake the message it was queued behind).
  const posts = useRef<Promise<void>>(Promise.resolve());
  // Messages that wait for the thread, in order; they join the conversation when their turn comes.
  const [queued, setQueued] = useState<ChatMessage[]>(() => initialMessages.filter(isQueued));
  // A sync started a response's stream here: once it ends, look again (it may have ended before we attached).
  const [followUp, setFollowUp] = useState(false);
  const transport = useMemo(
    () =>
      new DefaultChatTransport<ChatMessage>({
        api: `/api/threads/${threadId}/chat`,
        // The server keeps the history; send only the new message.
        prepareSendMessagesRequest: ({ messages }) => ({ body: { message: messages[messages.length - 1] } }),
        // A response keeps running on the server across reloads; reattach to it (204 when none runs).
        prepareReconnectToStreamRequest: () => ({ api: `/api/threads/${threadId}/chat/stream` }),
        // Another tab's response runs: the server queued this message (202). It leaves the
        // conversation for the queue, and this request ends with nothing streamed.
        fetch: async (input, init) => {
          const pending = init?.method === "POST" ? sent.current : null;
          let res: Response;
          try {
            res = await fetch(input, init);
          } finally {
            pending?.answered();
          }
          if (res.status !== 202) return res;
          const { position } = queuedMessageSchema.parse(await res.json());
          const message = sent.current?.message;
          sent.current = null;
          if (message) {
            chatRef.current?.setMessages((ms) => ms.filter((m) => m.id !== message.id));
            setQueued((q) => [...q, { ...message, metadata: { queued: true, position } }]);
          }
          return new Response("", { status: 200, headers: { "content-type": "text/event-stream" } });
        },
      }),
    [threadId],
  );
  // The first reattach check: a message sent before it ends waits for it (both would race for the stream).
  const attached = useRef<Promise<void> | null>(null);
  const resumeRef = useRef<() => Promise<void>>(async () => {});
  const chatRef = useRef<{ setMessages: (update: (ms: ChatMessage[]) => ChatMessage[]) => void } | null>(null);
  const eventsRef = useRef(events);
  eventsRef.current = events;
  const filesChanged = () => void queryClient.invalidateQueries({ queryKey: filesKey(threadId) });

  const chat = useChat<ChatMessage>({
    id: threadId,
    messages: initialMessages.filter((m) => !isQueued(m)),
    transport,
    experimental_throttle: 40,
    onFinish: () => {
      sent.current?.answered();
      sent.current = null;
      void queryClient.invalidateQueries({ queryKey: THREADS_KEY });
      // The run's tools (and its sub-agents') may have written files.
      filesChanged();
    },
    onError: () => {
      const failed = sent.current;
      sent.current = null;
      if (!failed) return;
      failed.answered();
      // The server stored nothing of a refused message (409, 4xx): take it out of the transcript.
      chat.setMessages((ms) => ms.filter((m) => m.id !== failed.message.id));
      eventsRef.current.onRefused(failed.text);
    },
  });
  const { messages, setMessages, sendMessage, status, stop, error } = chat;
  resumeRef.current = chat.resumeStream;
  chatRef.current = chat;

  // Reattach to a response still running on the server (after a reload, or in another tab);
  // the server answers 204 when none runs. Once per mount.
  // A response that ended between this page's render and the reattach (204) is stored: one
  // look at the thread afterwards (the sync below) shows it.
  useEffect(() => {
    attached.current ??= resumeRef
      .current()
      .catch(() => {})
      .then(() => setFollowUp(true));
  }, []);

  const errorText = error ? chatErrorMessage(error) : null;
  // Refused because this thread is busy (another tab sent first): load what was stored
  // meanwhile and follow the running response here.
  useEffect(() => {
    if (status !== "error" || errorText !== THREAD_BUSY_MESSAGE) return;
    eventsRef.current.onBusy();
    void (async () => {
      setMessages((await fetchThreadMessages(threadId)).filter((m) => !isQueued(m)));
      await resumeRef.current();
    })().catch(() => {});
  }, [status, errorText, threadId, setMessages]);

  // A continuation after approvals streams here outside useChat (followContinuation).
  const [continuing, setContinuing] = useState(false);
  const busy = status === "submitted" || status === "streaming" || continuing;
  const busyRef = useRef(busy);
  busyRef.current = busy;

  // While messages wait (or a followed response just ended) and nothing streams here: take the
  // server's conversation and queue, and follow the response of a message whose turn came.
  const watching = !busy && (queued.length > 0 || followUp);
  const queuedRef = useRef(queued);
  queuedRef.current = queued;
  const messagesRef = useRef(messages);
  messagesRef.current = messages;
  useEffect(() => {
    if (!watching) return;
    let cancelled = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let behindSince: number | undefined;
    const sync = async () => {
      const stored = await fetchThreadMessages(threadId).catch(() => null);
      if (cancelled) return;
      // Busy again: this effect runs anew once the stream here ends.
      if (busyRef.current) return;
      if (!stored) {
        timer = setTimeout(() => void sync(), QUEUE_POLL_MS);
        return;
      }
      const storedIds = new Set(stored.map((m) => m.id));
      // Sent a moment ago and not stored yet: keep showing it.
      const unsent = queuedRef.current.filter((m) => !storedIds.has(m.id));
      setQueued([...stored.filter(isQueued), ...unsent]);
      const conversation = stored.filter((m) => !isQueued(m));
      const local = new Set(messagesRef.current.map((m) => m.id));
      const fresh = conversation.some((m) => !local.has(m.id));
      // A reply this tab has that is not stored yet (a stopped one being saved) would vanish
      // for a moment: wait for it, a little.
      const behind = messagesRef.current.some((m) => !storedIds.has(m.id));
      if (behind) behindSince ??= Date.now();
      if (fresh && (!behind || Date.now() - (behindSince ?? 0) > 3_000)) {
        setMessages(conversation);
        setFollowUp(true);
        await resumeRef.current().catch(() => {});
        // Nothing ran (204), so this tab stayed idle: look again.
        if (!cancelled) timer = setTimeout(() => void sync(), QUEUE_POLL_MS);
        return;
      }
      // Nothing new: a followed response is over; keep polling while messages wait.
      setFollowUp(false);
      if (!cancelled) timer = setTimeout(() => void sync(), QUEUE_POLL_MS);
    };
    void sync();
    return () => {
      cancelled = true;
      clearTimeout(timer);
    };
  }, [watching, threadId, setMessages]);

  // The panel stored something in the thread (a batch the New batch dialog submitted leaves its
  // receipt, and may title the thread): look again, as after a followed response.
  useChatLookRequests(threadId, () => {
    setFollowUp(true);
    void queryClient.invalidateQueries({ queryKey: THREADS_KEY });
  });

  // The lead's replies to settled batches arrive without a request of this tab.
  useWakeupMessages({
    threadId,
    messages,
    idle: !busy,
    append: (fresh) => {
      setMessages((prev) => [...prev, ...fresh]);
      // A wake-up reply is a run too: its tools may have written files.
      filesChanged();
    },
  });

  // A lead reply waiting for a person goes on once decided (here, in another tab, or by the timeout).
  useFollowDecidedApprovals({ threadId, busy, setMessages, follow: followContinuation });

  /**
   * Streams a continuation into the reply it continues. Not useChat's resumeStream: that reads a
   * reattached stream as a whole message from its first chunk, and a continuation's stream holds
   * only what comes after the decisions (its first tool output would name a call the fresh
   * message does not have). readUIMessageStream goes on from the stored reply instead.
   */
  async function followContinuation(asking: ChatMessage) {
    const stream = await transport.reconnectToStream({ chatId: threadId });
    if (!stream) return;
    setContinuing(true);
    try {
      for await (const message of readUIMessageStream<ChatMessage>({ message: asking, stream })) {
        setMessages((ms) => (ms.some((m) => m.id === message.id) ? ms.map((m) => (m.id === message.id ? message : m)) : [...ms, message]));
      }
    } finally {
      setContinuing(false);
      void queryClient.invalidateQueries({ queryKey: THREADS_KEY });
      filesChanged();
    }
  }

  /** Sent while a response runs (or others wait): queued on the server, shown queued at once. */
  async function enqueue(message: ChatMessage, typed: string) {
    setQueued((q) => [...q, { ...message, metadata: { queued: true } }]);
    const answer = posts.current.then(() =>
      fetch(`/api/threads/${threadId}/chat?busy=enqueue`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ message }),
      }).catch(() => null),
    );
    posts.current = answer.then(() => {});
    const res = await answer;
    if (res?.status === 202) {
      const parsed = queuedMessageSchema.safeParse(await res.json().catch(() => null));
      const position = parsed.success ? parsed.data.position : undefined;
      setQueued((q) => q.map((m) => (m.id === message.id ? { ...m, metadata: { queued: true, position } } : m)));
      return;
    }
    if (res?.ok) {
      // The thread was free after all: the server started it; it is followed like a queued one whose turn came.
      void res.body?.cancel();
      setQueued((q) => q.map((m) => (m.id === message.id ? { ...m, metadata: {} } : m)));
      return;
    }
    setQueued((q) => q.filter((m) => m.id !== message.id));
    eventsRef.current.onRefused(typed);
    eventsRef.current.onQueueRefused(res ? chatErrorMessage(new Error(await res.text().catch(() => ""))) : "The message could not be sent. Check your connection and send it again.");
  }

  function send(text: string, typed: string) {
    chat.clearError();
    const message: ChatMessage = { id: `u_${crypto.randomUUID().replace(/-/g, "")}`, role: "user", parts: [{ type: "text", text }] };
    // Behind a running response, a message still on its way, or messages already waiting: in order, after them.
    if (busy || queued.length > 0 || sent.current) {
      void enqueue(message, typed);
      return;
    }
    let answered = () => {};
    const reply = new Promise<void>((resolve) => {
      answered = resolve;
    });
    sent.current = { message, text: typed, answered };
    const before = posts.current;
    posts.current = reply;
    void Promise.all([attached.current, before]).then(() => sendMessage(message));
    // The first message titles the thread; refresh the sidebar shortly after it is stored.
    setTimeout(() => void queryClient.invalidateQueries({ queryKey: THREADS_KEY }), 500);
  }

  /** Stops the running response only: queued messages are the person's, and keep their turn. */
  async function stopReply() {
    const target = [...messages].reverse().find((m) => m.role === "assistant");
    await stopLeadRun(threadId, target, stop);
    // The stream was cut before the server's final status arrived: show "Stopped" now.
    if (target)
      setMessages((ms) => ms.map((m) => (m.id === target.id ? { ...m, metadata: { ...m.metadata, status: "cancelled" } } : m)));
  }

  const last = messages[messages.length - 1];
  return {
    messages,
    queued,
    busy,
    thinking: status === "submitted",
    streamingId: (status === "streaming" || continuing) && last?.role === "assistant" ? last.id : null,
    errorText,
    send,
    stop: stopReply,
  };
}
