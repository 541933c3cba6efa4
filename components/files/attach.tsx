"use client";

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { type DragEvent, type HTMLAttributes, type ReactNode, useEffect, useRef, useState } from "react";
import type { FileProjection } from "@/lib/api/files";
import { Spinner } from "@/components/ui/spinner";
import { errorMessage } from "../batches/shared";
import { filesKey, uploadFiles } from "./api";


function useUpload(threadId: string) {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (files: File[]) => uploadFiles(threadId, files),
    onSuccess: (written) => {
      qc.setQueryData<FileProjection[]>(filesKey(threadId), (list) => {
        const paths = new Set(written.map((f) => f.path));
        return [...(list ?? []).filter((f) => !paths.has(f.path)), ...written].sort((a, b) => (a.path < b.path ? -1 : 1));
      });
      void qc.invalidateQueries({ queryKey: filesKey(threadId) });
    },
  });
}

type Upload = ReturnType<typeof useUpload>;

/** How long "Added …" stays; errors stay until the next upload. */
const SUCCESS_NOTE_MS = 8_000;

function UploadStatus({ upload }: { upload: Upload }) {
  const { isSuccess, reset } = upload;
  useEffect(() => {
    if (!isSuccess) return;
    const timer = setTimeout(reset, SUCCESS_NOTE_MS);
    return () => clearTimeout(timer);
  }, [isSuccess, reset]);
  if (upload.isIdle) return null;
  return (
    <p
      role={upload.isError ? "alert" : "status"}
      data-testid="upload-status"
      className={`mx-auto mb-2 flex w-full max-w-3xl items-center gap-2 text-xs ${upload.isError ? "text-red-700" : "text-zinc-600"}`}
    >
      {upload.isPending ? (
        <>
          <Spinner className="size-3" /> Uploading {upload.variables.length === 1 ? upload.variables[0]!.name : `${upload.variables.length} files`}…
        </>
      ) : upload.isError ? (
        `Upload failed: ${errorMessage(upload.error)}`
      ) : (
        `Added ${upload.data.length === 1 ? upload.data[0]!.path : `${upload.data.length} files`} to this thread's files.`
      )}
    </p>
  );
}

const hasFiles = (e: DragEvent) => Array.from(e.dataTransfer.types).includes("Files");

/**
 * The chat's attachments, as pieces the chat places where it wants them: `dropTarget` (props
 * for the element that accepts dropped files; it must be positioned), `overlay` (shown while
 * files are dragged over it), `button` ("Attach files") and `status` (the upload's progress or
 * error). One upload at a time; every file of one drop or pick goes in one request.
 */
export function useAttachFiles(threadId: string): {
  dropTarget: HTMLAttributes<HTMLElement>;
  overlay: ReactNode;
  button: ReactNode;
  status: ReactNode;
} {
  const upload = useUpload(threadId);
  const input = useRef<HTMLInputElement>(null);
  const [over, setOver] = useState(false);
  const depth = useRef(0);
  const send = (list: FileList | null) => {
    const files = Array.from(list ?? []);
    if (files.length > 0 && !upload.isPending) upload.mutate(files);
  };

  const dropTarget: HTMLAttributes<HTMLElement> = {
    onDragEnter: (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      depth.current++;
      setOver(true);
    },
    onDragOver: (e) => {
      if (hasFiles(e)) e.preventDefault();
    },
    onDragLeave: (e) => {
      if (!hasFiles(e)) return;
      depth.current = Math.max(0, depth.current - 1);
      if (depth.current === 0) setOver(false);
    },
    onDrop: (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      depth.current = 0;
      setOver(false);
      send(e.dataTransfer.files);
    },
  };

  const button = (
    <>
      <input
        ref={input}
        type="file"
        multiple
        hidden
        data-testid="attach-input"
        onChange={(e) => {
          send(e.target.files);
          e.target.value = "";
        }}
      />
      <button
        type="button"
        aria-label="Attach files"
        title="Attach files to this thread (or drop them on the chat)"
        disabled={upload.isPending}
        onClick={() => input.current?.click()}
        className="inline-flex size-10 shrink-0 items-center justify-center rounded-lg border border-zinc-300 bg-white text-zinc-700 hover:bg-zinc-50 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-zinc-900 disabled:text-zinc-400"
      >
        <svg aria-hidden viewBox="0 0 20 20" className="size-5" fill="none" stroke="currentColor" strokeWidth="1.6">
          <path d="M13.5 6.5l-6 6a1.8 1.8 0 002.5 2.5l6.2-6.2a3.5 3.5 0 00-5-5L5 10a5 5 0 007 7l5-5" strokeLinecap="round" />
        </svg>
      </button>
    </>
  );

  const overlay = over ? (
    <div
      data-testid="drop-overlay"
      className="pointer-events-none absolute inset-2 z-10 flex items-center justify-center rounded-xl border-2 border-dashed border-sky-500 bg-sky-50/90 text-sm font-medium text-sky-900"
    >
      Drop files to add them to this thread&apos;s files
    </div>
  ) : null;

  return { dropTarget, overlay, button, status: <UploadStatus upload={upload} /> };
}
