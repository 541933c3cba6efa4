"use client";

import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect } from "react";
import type { ChatMessage } from "@/lib/api/chat";
import { fetchNotifications, fetchThreadMessages, markSettlementsSeen } from "./api";
import { batchKeys } from "./panel-state";

/**
 * Settlement notifications in the open app: the sidebar badge of threads whose batches settled
 * since they were last opened (cleared by opening the thread), and the lead's wake-up replies
 * appearing in an open chat without reload.
 */

/** One poll every 5 s serves both the badges and the chats' wake-up watch. */
function useNotifications() {
  return useQuery({
    queryKey: batchKeys.notifications,
    queryFn: ({ signal }) => fetchNotifications(signal),
    refetchInterval: 5_000,
  });
}

/** A dot on a thread with an unseen settled batch; on the open thread it clears the badge instead. */
export function SettledBadge({ threadId, current }: { threadId: string; current: boolean }) {
  const qc = useQueryClient();
  const { data } = useNotifications();
  const mine = (data?.unseen ?? []).filter((u) => u.thread_id === threadId);
  const has = mine.length > 0;
  useEffect(() => {
    if (!current || !has) return;
    void markSettlementsSeen(threadId)
      .catch(() => null)
      .then(() => qc.invalidateQueries({ queryKey: batchKeys.notifications }));
  }, [current, has, threadId, qc]);
  if (!has || current) return null;
  const failed = mine.some((u) => u.status === "failed");
  const label = `${mine.length} batch${mine.length === 1 ? "" : "es"} finished since you last looked`;
  return (
    <span
      data-testid="settled-badge"
      title={label}
      className={`ml-auto inline-flex min-w-5 shrink-0 items-center justify-center rounded-full px-1.5 text-[11px] font-semibold text-white ${failed ? "bg-red-600" : "bg-sky-600"}`}
    >
      <span className="sr-only">{label}: </span>
      {mine.length}
    </span>
  );
}

/** The lead's replies that arrive in a chat without a request of its own. */
const WAKEUP_TRIGGERS = new Set(["batch_settled", "children_settled"]);

/**
 * The lead's wake-up replies in an open chat, both kinds alike: a settled batch's and settled
 * background children's. Polls the thread's messages while a wake-up of the thread is pending
 * or one of its replies of the last minute is missing from this tab (the shared notifications
 * poll says both; a quick wake-up can start and end between two of its polls), and appends the
 * replies the tab does not have (only while the chat is idle). Running batches and children cost
 * no message polls.
 */
export function useWakeupMessages(args: {
  threadId: string;
  messages: ChatMessage[];
  idle: boolean;
  append: (messages: ChatMessage[]) => void;
}) {
  const { threadId, messages, idle, append } = args;
  const { data } = useNotifications();
  const known = new Set(messages.map((m) => m.id));
  const pending = (data?.pending_wakeups ?? []).includes(threadId);
  const missing = (data?.recent_replies ?? []).some((r) => r.thread_id === threadId && !known.has(r.message_id));
  const poll = useQuery({
    queryKey: ["thread-messages", threadId],
    queryFn: ({ signal }) => fetchThreadMessages(threadId, signal),
    enabled: idle && (pending || missing),
    refetchInterval: 2_000,
  });
  const fresh = (poll.data ?? []).filter((m) => !known.has(m.id) && WAKEUP_TRIGGERS.has(m.metadata?.trigger ?? ""));
  const freshIds = fresh.map((m) => m.id).join(",");
  // biome-ignore lint/correctness/useExhaustiveDependencies: keyed by the ids of the new messages
  useEffect(() => {
    if (idle && fresh.length > 0) append(fresh);
  }, [freshIds, idle]);
}
