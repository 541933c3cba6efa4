"use client";

import { useMutation, useQueryClient } from "@tanstack/react-query";
import type { BatchProjection } from "@/lib/api/batches";
import { retryItem } from "./api";
import { type PageChain, replaceItem } from "./item-pages";
import { batchKeys } from "./panel-state";

/**
 * Retries one item (as it was, or with a corrected input: the mutation's variable) and puts
 * the answer in place: the item wherever its pages are loaded, the reopened batch in the list.
 */
export function useRetryItem(threadId: string, batchId: string, itemId: string, onError?: () => void) {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (input: unknown) => retryItem(threadId, batchId, itemId, input),
    onSuccess: ({ item: fresh, batch }) => {
      qc.setQueriesData<PageChain>({ queryKey: batchKeys.items(threadId, batchId) }, (c) => (c ? replaceItem(c, fresh) : c));
      // The batch reopens: the panel polls it (and its items) again at once.
      qc.setQueryData<BatchProjection[]>(batchKeys.list(threadId), (list) => list?.map((b) => (b.id === batch.id ? batch : b)));
    },
    onError,
    onSettled: () => qc.invalidateQueries({ queryKey: batchKeys.list(threadId) }),
  });
}
