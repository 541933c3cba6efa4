"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect, useRef, useState } from "react";
import { CollapsibleHeader, CountPill, useFold } from "@/components/ui/collapsible-header";
import { type FileProjection, fileUrl } from "@/lib/api/files";
import { formatTime } from "@/lib/format";
import { ErrorText, shortId } from "../batches/ui";
import { buttonClasses } from "@/components/ui/button";
import { deleteFile, fetchFiles, filesKey, formatBytes } from "./api";

/**
 * The thread's workspace beside the batches: every file with its size and who wrote it (an
 * upload or a run), a download link and a delete button that asks first.
 *
 * It does not poll: the list is read on load and again when something writes files (this
 * tab's uploads and deletes, the end of a chat run, a batch whose artifacts changed, a
 * return to the tab). Without files it is only a hint (data-placeholder): the thread view
 * takes no room for it unless the batch panel is shown beside it.
 */
export function FilesSection({ threadId }: { threadId: string }) {
  const files = useQuery({
    queryKey: filesKey(threadId),
    queryFn: ({ signal }) => fetchFiles(threadId, signal),
  });
  const fold = useFold();
  const list = files.data ?? [];
  const total = list.reduce((sum, f) => sum + f.size, 0);

  return (
    <section
      aria-labelledby={fold.headingId}
      data-testid="files-section"
      data-placeholder={!files.isError && list.length === 0 ? "" : undefined}
      className="flex min-w-0 flex-col bg-white text-sm"
    >
      <CollapsibleHeader title="Files" fold={fold} className="border-y">
        <CountPill testId="files-count">
          {list.length} {list.length === 1 ? "file" : "files"}
          {list.length > 0 ? ` · ${formatBytes(total)}` : ""}
        </CountPill>
      </CollapsibleHeader>
      <div id={fold.bodyId} hidden={fold.collapsed}>
        {files.isError ? (
          <ErrorText error={files.error} className="px-4 py-3" />
        ) : files.isPending ? null : list.length === 0 ? (
          <p className="px-4 py-4 text-center text-zinc-600">
            No files yet. Attach files in the chat or drop them on it; files that sub-agents write appear here too.
          </p>
        ) : (
          <ul aria-label="Files of this thread" className="divide-y divide-zinc-100">
            {list.map((f) => (
              <FileRow key={f.path} threadId={threadId} file={f} />
            ))}
          </ul>
        )}
      </div>
    </section>
  );
}

function FileRow({ threadId, file }: { threadId: string; file: FileProjection }) {
  const qc = useQueryClient();
  const [confirming, setConfirming] = useState(false);
  const keep = useRef<HTMLButtonElement>(null);
  // The row's Delete button is gone once asked: keep the keyboard user on the safe choice.
  useEffect(() => {
    if (confirming) keep.current?.focus();
  }, [confirming]);
  const remove = useMutation({
    mutationFn: () => deleteFile(threadId, file.path),
    onSuccess: () => {
      qc.setQueryData<FileProjection[]>(filesKey(threadId), (list) => list?.filter((f) => f.path !== file.path));
      void qc.invalidateQueries({ queryKey: filesKey(threadId) });
    },
  });
  const name = file.path.split("/").pop()!;
  const folder = file.path.slice(0, file.path.length - name.length);
  return (
    <li data-testid="file-row" data-path={file.path} className="flex flex-wrap items-center gap-x-3 gap-y-1 px-4 py-2">
      <div className="min-w-0 flex-1">
        <p className="truncate font-mono text-xs text-zinc-900" title={file.path}>
          {folder ? <span className="text-zinc-500">{folder}</span> : null}
          {name}
        </p>
        <p className="text-xs text-zinc-600">
          <span className="tabular-nums">{formatBytes(file.size)}</span>
          {" · "}
          {file.created_by_run_id ? (
            <span title={`Written by run ${file.created_by_run_id}`}>
              written by run <span className="font-mono">{shortId(file.created_by_run_id)}</span>
            </span>
          ) : (
            "uploaded"
          )}
          {" · "}
          <time dateTime={file.created_at}>
            {formatTime(file.created_at)}
          </time>
        </p>
        {remove.isError ? <ErrorText error={remove.error} /> : null}
      </div>
      {confirming ? (
        <span className="flex items-center gap-1.5">
          <span className="text-xs text-zinc-700">Delete {name}?</span>
          <button
            type="button"
            disabled={remove.isPending}
            onClick={() => remove.mutate()}
            className={buttonClasses("dangerSolid", "xs")}
          >
            Delete
          </button>
          <button
            type="button"
            ref={keep}
            onClick={() => setConfirming(false)}
            className={buttonClasses("secondary", "xs")}
          >
            Keep
          </button>
        </span>
      ) : (
        <span className="flex items-center gap-1.5">
          <FileDownload threadId={threadId} path={file.path} />
          <button
            type="button"
            aria-label={`Delete ${file.path}`}
            onClick={() => setConfirming(true)}
            className={buttonClasses("secondary", "xs")}
          >
            Delete
          </button>
        </span>
      )}
    </li>
  );
}

/** A workspace file's download link (named by its path for assistive technology). */
export function FileDownload({ threadId, path }: { threadId: string; path: string }) {
  return (
    <a href={fileUrl(threadId, path)} download={path.split("/").pop()} aria-label={`Download ${path}`} className={buttonClasses("secondary", "xs")}>
      Download
    </a>
  );
}
