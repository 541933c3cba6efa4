"use client";

import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect } from "react";
import type { ChatMessage } from "@/server/chat/messages";
import { fetchNotifications, fetchThreadMessages, markSettlementsSeen } from "./api";
import { batchKeys, useLiveBatches } from "./panel-state";

/**
 * Settlement notifications in the open app: the sidebar badge of threads whose batches settled
 * since they were last opened (cleared by opening the thread), and the lead's wake-up replies
 * appearing in an open chat without reload (its messages are polled while a wake-up of the
 * thread is pending; the chat's resumable stream replaces this at merge).
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

/** A settled batch of the open thread may still produce a wake-up reply within this long. */
const SETTLED_WATCH_MS = 60_000;

/**
 * Polls the thread's messages while a lead wake-up of this thread is pending (the shared
 * notifications poll says so) or one of its batches settled in the last minute without a reply
 * in this tab yet (a quick wake-up can start and finish between two notification polls), and
 * appends the lead's batch_settled replies the tab does not have (only while the chat is idle).
 * A running batch costs no message polls.
 */
export function useWakeupMessages(args: {
  threadId: string;
  messages: ChatMessage[];
  idle: boolean;
  append: (messages: ChatMessage[]) => void;
}) {
  const { threadId, messages, idle, append } = args;
  const { data } = useNotifications();
  const pending = (data?.pending_wakeups ?? []).includes(threadId);
  const batches = useLiveBatches(threadId);
  const replied = new Set(messages.map((m) => m.metadata?.batch_id).filter(Boolean));
  const now = Date.now();
  const recentlySettled = batches.some(
    (b) =>
      b.thread_id === threadId &&
      b.finished_at !== null &&
      now - new Date(b.finished_at).getTime() < SETTLED_WATCH_MS &&
      !replied.has(b.id),
  );
  const known = new Set(messages.map((m) => m.id));
  const poll = useQuery({
    queryKey: ["thread-messages", threadId],
    queryFn: ({ signal }) => fetchThreadMessages(threadId, signal),
    enabled: idle && (pending || recentlySettled),
    refetchInterval: 2_000,
  });
  const fresh = (poll.data ?? []).filter((m) => !known.has(m.id) && m.metadata?.trigger === "batch_settled");
  const freshIds = fresh.map((m) => m.id).join(",");
  // biome-ignore lint/correctness/useExhaustiveDependencies: keyed by the ids of the new messages
  useEffect(() => {
    if (idle && fresh.length > 0) append(fresh);
  }, [freshIds, idle]);
}
