"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { fetchJson, sendJson } from "@/lib/api/client";
import { type ThreadProjection, threadDeletedSchema, threadListSchema, threadProjectionSchema } from "@/lib/api/threads";

export type ThreadSummary = ThreadProjection;

export const THREADS_KEY = ["threads"] as const;
type ThreadList = { threads: ThreadSummary[] };

const threadUrl = (id: string) => `/api/threads/${encodeURIComponent(id)}`;

/** The signed-in user's threads (the sidebar seeds it with the server-rendered list). */
export function useThreads(initial?: ThreadSummary[]) {
  return useQuery({
    queryKey: THREADS_KEY,
    queryFn: ({ signal }) => fetchJson(threadListSchema, "/api/threads", "thread list", { signal }),
    ...(initial ? { initialData: { threads: initial } } : {}),
  });
}

/** "New thread": the newest thread when it is still blank, else a new one (the server decides). */
export function useOpenNewThread() {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: () => sendJson(threadProjectionSchema, "/api/threads", "thread", { reuse_blank: true }),
    onSuccess: (thread) => {
      queryClient.setQueryData<ThreadList>(THREADS_KEY, (old) => ({
        threads: [thread, ...(old?.threads ?? []).filter((t) => t.id !== thread.id)],
      }));
    },
  });
}

export function useRenameThread() {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: ({ id, title }: { id: string; title: string }) =>
      sendJson(threadProjectionSchema, threadUrl(id), "thread", { title }, { method: "PATCH" }),
    onSuccess: (thread) => {
      queryClient.setQueryData<ThreadList>(THREADS_KEY, (old) => ({
        threads: (old?.threads ?? []).map((t) => (t.id === thread.id ? thread : t)),
      }));
    },
  });
}

export function useDeleteThread() {
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (id: string) => fetchJson(threadDeletedSchema, threadUrl(id), "delete answer", { method: "DELETE" }),
    onSuccess: ({ id }) => {
      queryClient.setQueryData<ThreadList>(THREADS_KEY, (old) => ({
        threads: (old?.threads ?? []).filter((t) => t.id !== id),
      }));
    },
  });
}
