"use client";

import { useQuery } from "@tanstack/react-query";
import { type FormEvent, useId, useState } from "react";
import type { ItemProjection } from "@/lib/api/batches";
import { draftText, parseDraft } from "@/lib/value-draft";
import { buttonClasses } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";
import { useValueDraft, ValueEditor } from "@/components/ui/value-editor";
import { fetchItemDetail } from "./api";
import { errorMessage, NO_WORKER_TITLE } from "./shared";
import { useRetryItem } from "./use-retry-item";

/**
 * "Edit input and retry" on a failed item: its whole input (read from the item's detail: the
 * row holds only the first characters) in an editor, sent back as a corrected input. The
 * server checks it as a submission item; its 400 names the field and shows under the editor.
 */
export function RetryInputEditor({
  item,
  threadId,
  batchId,
  canRetry,
}: {
  item: ItemProjection;
  threadId: string;
  batchId: string;
  canRetry: boolean;
}) {
  const [open, setOpen] = useState(false);
  if (!open)
    return (
      <button type="button" className={buttonClasses("secondary", "xs", "mt-1.5")} onClick={() => setOpen(true)}>
        Edit input and retry
      </button>
    );
  return <LoadedInput item={item} threadId={threadId} batchId={batchId} canRetry={canRetry} onClose={() => setOpen(false)} />;
}

type EditorProps = { item: ItemProjection; threadId: string; batchId: string; canRetry: boolean; onClose: () => void };

function LoadedInput(props: EditorProps) {
  const { item, threadId, batchId } = props;
  // The tool calls list reads the same detail under the same key: one request serves both.
  const detail = useQuery({
    queryKey: ["item-detail", threadId, batchId, item.id, item.finished_at],
    queryFn: ({ signal }) => fetchItemDetail(threadId, batchId, item.id, signal),
    staleTime: Number.POSITIVE_INFINITY,
  });
  if (detail.isPending) return <p className="mt-1.5 text-zinc-500">Loading the whole input…</p>;
  if (detail.error)
    return (
      <p role="alert" className="mt-1.5 text-red-700">
        The input could not be loaded: {errorMessage(detail.error)}
      </p>
    );
  return <InputDraft {...props} start={detail.data.editable_input} />;
}

function InputDraft({ item, threadId, batchId, canRetry, onClose, start }: EditorProps & { start: unknown }) {
  const json = typeof start !== "string";
  const input = useValueDraft(() => draftText(start, json));
  const { setError } = input;
  const retry = useRetryItem(threadId, batchId, item.id);
  const id = useId();

  function submit(e: FormEvent) {
    e.preventDefault();
    const parsed = parseDraft(input.value, json, "input");
    if ("error" in parsed) {
      setError(parsed.error);
      return;
    }
    setError(null);
    retry.mutate(parsed.value, { onError: (err) => setError(errorMessage(err)) });
  }

  return (
    <form data-testid="retry-input-editor" onSubmit={submit} className="mt-1.5 space-y-2 rounded-lg border border-zinc-200 bg-white p-3">
      <ValueEditor
        id={id}
        label="Input to retry with"
        hint={
          json
            ? "JSON: the item's fields (and expected), or { \"prompt\": … }, checked as a submitted item would be. The earlier attempts stay."
            : "The text that fills the batch's prompt template, checked as a submitted item would be. The earlier attempts stay."
        }
        value={input.value}
        onChange={input.onChange}
        error={input.error}
        json={json}
        rows={json ? 8 : 4}
      />
      <div className="flex flex-wrap gap-2">
        <button
          type="submit"
          disabled={!canRetry || retry.isPending}
          title={canRetry ? undefined : NO_WORKER_TITLE}
          aria-busy={retry.isPending || undefined}
          className={buttonClasses("primary", "sm")}
        >
          {retry.isPending ? <Spinner className="size-3.5" /> : null}
          Retry
        </button>
        <button type="button" className={buttonClasses("secondary", "sm")} onClick={onClose}>
          Cancel
        </button>
      </div>
    </form>
  );
}
