"use client";

import { useChat } from "@ai-sdk/react";
import { useQueryClient } from "@tanstack/react-query";
import { DefaultChatTransport } from "ai";
import { useEffect, useMemo, useRef } from "react";
import { fetchThreadMessages } from "@/components/batches/api";
import { useWakeupMessages } from "@/components/batches/notifications";
import { filesKey } from "@/components/files/api";
import { THREAD_BUSY_MESSAGE } from "@/lib/api/chat";
import type { ChatMessage } from "@/lib/api/chat";
import { stopLeadRun } from "./subagent-card";
import { THREADS_KEY } from "./threads-api";

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

/**
 * One thread's conversation with the lead agent: the AI SDK chat over this thread's
 * endpoints, reattached to a response still running on the server, following another tab's
 * running response when this one is refused as busy, and receiving the lead's wake-up replies.
 */
export function useThreadChat(
  threadId: string,
  initialMessages: ChatMessage[],
  events: {
    /** A refused message's text, for the composer to give back. */
    onRefused: (text: string) => void;
    /** Refused because another tab's response runs in this thread. */
    onBusy: () => void;
  },
) {
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
  // The message in flight, given back to the composer if it is refused.
  const sent = useRef<{ id: string; text: string } | null>(null);
  // The first reattach check: a message sent before it ends waits for it (both would race for the stream).
  const attached = useRef<Promise<void> | null>(null);
  const resumeRef = useRef<() => Promise<void>>(async () => {});
  const eventsRef = useRef(events);
  eventsRef.current = events;
  const filesChanged = () => void queryClient.invalidateQueries({ queryKey: filesKey(threadId) });

  const chat = useChat<ChatMessage>({
    id: threadId,
    messages: initialMessages,
    transport,
    experimental_throttle: 40,
    onFinish: () => {
      sent.current = null;
      void queryClient.invalidateQueries({ queryKey: THREADS_KEY });
      // The run's tools (and its sub-agents') may have written files.
      filesChanged();
    },
    onError: () => {
      const failed = sent.current;
      sent.current = null;
      if (!failed) return;
      // The server stored nothing of a refused message (409, 4xx): take it out of the transcript.
      chat.setMessages((ms) => ms.filter((m) => m.id !== failed.id));
      eventsRef.current.onRefused(failed.text);
    },
  });
  const { messages, setMessages, sendMessage, status, stop, error } = chat;
  resumeRef.current = chat.resumeStream;

  // Reattach to a response still running on the server (after a reload, or in another tab);
  // the server answers 204 when none runs. Once per mount.
  useEffect(() => {
    attached.current ??= resumeRef.current().catch(() => {});
  }, []);

  const errorText = error ? chatErrorMessage(error) : null;
  // Refused because this thread is busy (another tab sent first): load what was stored
  // meanwhile and follow the running response here.
  useEffect(() => {
    if (status !== "error" || errorText !== THREAD_BUSY_MESSAGE) return;
    eventsRef.current.onBusy();
    void (async () => {
      setMessages(await fetchThreadMessages(threadId));
      await resumeRef.current();
    })().catch(() => {});
  }, [status, errorText, threadId, setMessages]);

  const busy = status === "submitted" || status === "streaming";
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

  function send(text: string, typed: string) {
    chat.clearError();
    const id = `u_${crypto.randomUUID().replace(/-/g, "")}`;
    sent.current = { id, text: typed };
    void (attached.current ?? Promise.resolve()).then(() => sendMessage({ id, role: "user", parts: [{ type: "text", text }] }));
    // The first message titles the thread; refresh the sidebar shortly after it is stored.
    setTimeout(() => void queryClient.invalidateQueries({ queryKey: THREADS_KEY }), 500);
  }

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
    busy,
    thinking: status === "submitted",
    streamingId: status === "streaming" && last?.role === "assistant" ? last.id : null,
    errorText,
    send,
    stop: stopReply,
  };
}
