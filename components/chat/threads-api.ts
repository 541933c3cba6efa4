"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import type { ThreadProjection } from "@/lib/api/chat";

export type ThreadSummary = ThreadProjection;

export const THREADS_KEY = ["threads"] as const;

/** Reads `{ error: { message } }` from an API error response, or a generic line. */
export async function apiError(res: Response): Promise<Error> {
  const body = await res.json().catch(() => null);
  return new Error(body?.error?.message ?? `request failed (HTTP ${res.status})`);
}

async function fetchThreads(): Promise<{ threads: ThreadSummary[] }> {
  const res = await fetch("/api/threads", { cache: "no-store" });
  if (!res.ok) throw await apiError(res);
  return res.json();
}

/** The signed-in user's threads (the sidebar seeds it with the server-rendered list). */
export function useThreads(initial?: ThreadSummary[]) {
  return useQuery({
    queryKey: THREADS_KEY,
    queryFn: fetchThreads,
    ...(initial ? { initialData: { threads: initial } } : {}),
  });
}

export function useCreateThread() {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: async (): Promise<ThreadSummary> => {
      const res = await fetch("/api/threads", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
      });
      if (!res.ok) throw await apiError(res);
      return res.json();
    },
    onSuccess: (thread) => {
      queryClient.setQueryData<{ threads: ThreadSummary[] }>(THREADS_KEY, (old) => ({
        threads: [thread, ...(old?.threads ?? []).filter((t) => t.id !== thread.id)],
      }));
    },
  });
}

export function useRenameThread() {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: async ({ id, title }: { id: string; title: string }): Promise<ThreadSummary> => {
      const res = await fetch(`/api/threads/${id}`, {
        method: "PATCH",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ title }),
      });
      if (!res.ok) throw await apiError(res);
      return res.json();
    },
    onSuccess: (thread) => {
      queryClient.setQueryData<{ threads: ThreadSummary[] }>(THREADS_KEY, (old) => ({
        threads: (old?.threads ?? []).map((t) => (t.id === thread.id ? thread : t)),
      }));
    },
  });
}

export function useDeleteThread() {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: async (id: string): Promise<{ id: string; cancelled_batches: number }> => {
      const res = await fetch(`/api/threads/${id}`, { method: "DELETE" });
      if (!res.ok) throw await apiError(res);
      return res.json();
    },
    onSuccess: ({ id }) => {
      queryClient.setQueryData<{ threads: ThreadSummary[] }>(THREADS_KEY, (old) => ({
        threads: (old?.threads ?? []).filter((t) => t.id !== id),
      }));
    },
  });
}
