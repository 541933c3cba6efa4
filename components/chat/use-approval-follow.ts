"use client";

import { useEffect, useRef } from "react";
import { fetchThreadMessages } from "@/components/batches/api";
import type { ChatMessage } from "@/lib/api/chat";
import { useThreadApprovals } from "./approval-card";

/** How long a tab follows a decided lead call before leaving it to the next reload. */
const FOLLOW_MS = 90_000;
const FOLLOW_EVERY_MS = 1_000;

/**
 * A lead reply that ended on calls waiting for a person goes on in the same message once they
 * are decided, here, in another tab or by the timeout. When such a call leaves the waiting list,
 * this tab takes the stored conversation and follows the continuation's stream into the reply
 * that asked (`follow`), until the stored reply is the continuation's (its run id is no longer
 * the asking run's).
 */
export function useFollowDecidedApprovals(args: {
  threadId: string;
  busy: boolean;
  setMessages: (messages: ChatMessage[]) => void;
  /** Streams the running continuation into `asking` (the stored reply that asked). */
  follow: (asking: ChatMessage) => Promise<void>;
}) {
  const { data } = useThreadApprovals(args.threadId);
  const argsRef = useRef(args);
  argsRef.current = args;
  const waiting = useRef(new Map<string, { runId: string; toolCallId: string }>());
  const lead = (data ?? []).filter((a) => a.kind === "lead");
  const key = lead.map((a) => a.id).join(",");

  // biome-ignore lint/correctness/useExhaustiveDependencies: keyed by the ids of the waiting lead calls
  useEffect(() => {
    if (!data) return;
    const now = new Map(lead.map((a) => [a.id, { runId: a.run_id, toolCallId: a.tool_call_id }]));
    const gone = [...waiting.current].filter(([id]) => !now.has(id)).map(([, v]) => v);
    waiting.current = now;
    if (gone.length === 0) return;
    let cancelled = false;
    const runIds = new Set(gone.map((g) => g.runId));
    const deadline = Date.now() + FOLLOW_MS;
    void (async () => {
      while (!cancelled && Date.now() < deadline) {
        const a = argsRef.current;
        if (!a.busy) {
          const stored = await fetchThreadMessages(a.threadId).catch(() => null);
          if (cancelled) return;
          if (stored && !argsRef.current.busy) {
            argsRef.current.setMessages(stored.filter((m) => m.metadata?.queued !== true));
            const asking = stored.find((m) => m.parts.some((p) => gone.some((g) => (p as { toolCallId?: string }).toolCallId === g.toolCallId)));
            if (!asking || !runIds.has(asking.metadata?.runId ?? "")) return;
            await argsRef.current.follow(asking).catch(() => {});
          }
        }
        await new Promise((r) => setTimeout(r, FOLLOW_EVERY_MS));
      }
    })();
    return () => {
      cancelled = true;
    };
  }, [key, data === undefined]);
}
