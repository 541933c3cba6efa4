"use client";

import { useQuery } from "@tanstack/react-query";
import { useDeferredValue, useEffect, useId, useMemo } from "react";
import { FILE_PLACEHOLDER, fileGlobMatcher, globForPaths, MAX_GLOB_CHARS } from "@/lib/api/files";
import { fetchFiles, filesKey, formatBytes } from "./api";

/** What the New batch dialog needs to submit a batch over files. */
export interface FilesSelection {
  glob: string;
  count: number;
  problem: string | null;
}

function matchingPaths(list: readonly { path: string }[], glob: string): Set<string> {
  if (glob.trim() === "") return new Set<string>();
  const isMatch = fileGlobMatcher(glob);
  return new Set(list.filter((f) => isMatch(f.path)).map((f) => f.path));
}

const PREVIEW_COUNT = 3;
const PREVIEW_CHARS = 400;

/**
 * "From files" in the New batch dialog: a glob (or files ticked one by one, which writes the
 * glob) over the thread's workspace, with the matching count and the first prompts as the
 * server will build them — the same matcher the server uses.
 */
export function FilesBatchSource({
  threadId,
  glob,
  template,
  onGlobChange,
  onSelection,
}: {
  threadId: string;
  glob: string;
  template: string;
  onGlobChange: (glob: string) => void;
  onSelection: (selection: FilesSelection) => void;
}) {
  const files = useQuery({ queryKey: filesKey(threadId), queryFn: ({ signal }) => fetchFiles(threadId, signal) });
  const ids = { glob: useId(), hint: useId(), count: useId() };
  const deferred = useDeferredValue(glob);
  const list = files.data ?? [];
  const matching = useMemo(() => matchingPaths(list, deferred), [deferred, list]);
  // The checkboxes follow the glob as typed, not the deferred one: a click shows its tick at
  // once (and the next click builds on it), whatever the count and previews lag behind.
  const ticked = useMemo(() => matchingPaths(list, glob), [glob, list]);

  const problem =
    glob.trim() === ""
      ? "Enter a glob such as reports/*.md, or tick files."
      : glob.length > MAX_GLOB_CHARS
        ? `The glob is longer than ${MAX_GLOB_CHARS} characters; use a pattern instead of ticking so many files.`
        : !template.includes(FILE_PLACEHOLDER)
          ? `The prompt template must contain ${FILE_PLACEHOLDER}.`
          : files.isSuccess && matching.size === 0
            ? "No file of this thread matches the glob."
            : null;
  useEffect(() => onSelection({ glob, count: matching.size, problem }), [glob, matching, problem, onSelection]);

  const toggle = (path: string, on: boolean) => {
    const picked = list.filter((f) => (f.path === path ? on : ticked.has(f.path))).map((f) => f.path);
    onGlobChange(picked.length === 0 ? "" : globForPaths(picked));
  };
  const previews = list
    .filter((f) => matching.has(f.path))
    .slice(0, PREVIEW_COUNT)
    .map((f) => template.split(FILE_PLACEHOLDER).join(f.path));

  return (
    <div className="flex flex-col gap-2">
      <div className="flex flex-col gap-1">
        <label htmlFor={ids.glob} className="text-xs font-medium text-zinc-700">
          Files (glob)
        </label>
        <input
          id={ids.glob}
          value={glob}
          onChange={(e) => onGlobChange(e.target.value)}
          aria-describedby={ids.hint}
          spellCheck={false}
          className="w-full rounded-md border border-zinc-300 bg-white px-2 py-1.5 font-mono text-sm text-zinc-900 focus-visible:outline-2 focus-visible:outline-sky-600"
        />
        <p id={ids.hint} className="text-xs text-zinc-600">
          One item per matching file, keyed by its path. <code className="font-mono">*</code> stays in a folder,{" "}
          <code className="font-mono">**</code> crosses folders. Each sub-agent gets the workspace tools to read its file.
        </p>
      </div>
      {files.isPending ? null : list.length === 0 ? (
        <p className="rounded-md bg-zinc-50 px-2 py-3 text-center text-xs text-zinc-600">
          This thread has no files yet. Attach some in the chat first.
        </p>
      ) : (
        <fieldset className="max-h-48 overflow-y-auto rounded-md border border-zinc-200">
          <legend className="sr-only">Files of this thread</legend>
          {list.map((f) => (
            <label key={f.path} className="flex items-center gap-2 px-2 py-1 text-xs hover:bg-zinc-50">
              <input type="checkbox" checked={ticked.has(f.path)} onChange={(e) => toggle(f.path, e.target.checked)} />
              <span className="min-w-0 flex-1 truncate font-mono" title={f.path}>
                {f.path}
              </span>
              <span className="text-zinc-500 tabular-nums">{formatBytes(f.size)}</span>
            </label>
          ))}
        </fieldset>
      )}
      <section aria-labelledby={ids.count} className="flex flex-col gap-1 rounded-md bg-zinc-50 p-2">
        <p id={ids.count} data-testid="new-batch-files-count" aria-live="polite" className="font-medium tabular-nums">
          {matching.size} {matching.size === 1 ? "file" : "files"} of {list.length} {matching.size === 1 ? "matches" : "match"}
        </p>
        {previews.length > 0 ? (
          <ol aria-label="First prompts" className="flex list-decimal flex-col gap-1 pl-5 text-xs text-zinc-700">
            {previews.map((p, i) => (
              <li key={i} data-testid="new-batch-files-preview" className="break-words whitespace-pre-wrap">
                {p.length > PREVIEW_CHARS ? `${p.slice(0, PREVIEW_CHARS)}…` : p}
              </li>
            ))}
          </ol>
        ) : null}
        {problem ? (
          <p role="alert" className="text-xs text-red-700">
            {problem}
          </p>
        ) : null}
      </section>
    </div>
  );
}
