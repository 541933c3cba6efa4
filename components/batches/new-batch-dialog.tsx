"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useDeferredValue, useEffect, useId, useMemo, useRef, useState } from "react";
import { FilesBatchSource, type FilesSelection } from "@/components/files/batch-source";
import type { BatchProjection } from "@/lib/api/batches";
import { type BatchSubmission, FILE_PLACEHOLDER } from "@/lib/api/files";
import { submissionLimits, submissionRefusal } from "@/lib/batch-rules";
import {
  buildSubmission,
  detectFormat,
  draftPrompt,
  formatCount,
  ITEM_PLACEHOLDER,
  type ItemsFormat,
  newSubmissionKey,
  parseItemsInput,
} from "@/lib/batches-ui";
import { fetchFeatures, submitBatch } from "./api";
import { BudgetFields, budgetBody } from "./loop";
import { errorMessage } from "./shared";
import { buttonClass, Spinner } from "./ui";

const PREVIEW_COUNT = 3;
const PREVIEW_CHARS = 400;
const MAX_FILE_BYTES = 20 * 1024 * 1024;
const FORMAT_LABEL: Record<ItemsFormat, string> = { lines: "one item per line", jsonl: "JSONL", csv: "CSV" };

const inputClass =
  "w-full rounded-md border border-zinc-300 bg-white px-2 py-1.5 text-sm text-zinc-900 placeholder:text-zinc-400 focus-visible:outline-2 focus-visible:outline-sky-600 disabled:bg-zinc-100 disabled:text-zinc-500";
const labelClass = "text-xs font-medium text-zinc-700";

function optionalInt(value: string): number | undefined {
  return value.trim() === "" ? undefined : Number(value);
}

/** Starts a batch without the chat: sub-agent, template, items (pasted or uploaded), preview, submit. */
export function NewBatchDialog({
  threadId,
  onClose,
  onCreated,
}: {
  threadId: string;
  onClose: () => void;
  onCreated: (batch: BatchProjection) => void;
}) {
  const qc = useQueryClient();
  const features = useQuery({ queryKey: ["features"], queryFn: ({ signal }) => fetchFeatures(signal) });
  const subagents = features.data?.subagents ?? [];
  const limits = features.data?.batches;
  const ref = useRef<HTMLDialogElement>(null);
  const ids = { title: useId(), subagent: useId(), template: useId(), items: useId(), file: useId() };
  const ids2 = { format: useId(), live: useId(), running: useId(), hint: useId(), count: useId() };

  const [subagent, setSubagent] = useState<string>("");
  const [template, setTemplate] = useState(ITEM_PLACEHOLDER);
  const [text, setText] = useState("");
  const [file, setFile] = useState<{ name: string; size: number; text: string } | null>(null);
  const [format, setFormat] = useState<ItemsFormat | "auto">("auto");
  const [maxLive, setMaxLive] = useState("");
  const [maxRunning, setMaxRunning] = useState("");
  const [maxTokens, setMaxTokens] = useState("");
  const [maxCost, setMaxCost] = useState("");
  const budget = budgetBody(maxTokens, maxCost);
  const [fileError, setFileError] = useState<string | null>(null);
  // "From files": a glob over the thread's workspace instead of typed items.
  const [fromFiles, setFromFiles] = useState(false);
  const [glob, setGlob] = useState("**");
  const [selection, setSelection] = useState<FilesSelection | null>(null);
  const [submitError, setSubmitError] = useState<string | null>(null);
  // One idempotency key per draft: a repeated click or a retry after a lost answer replays, an edit starts afresh.
  const keyRef = useRef<string | null>(null);

  const chosenSubagent = subagent || subagents.find((s) => s.name === "general")?.name || subagents[0]?.name || "";
  const source = useDeferredValue(file ? file.text : text);
  const effective = format === "auto" ? detectFormat(file?.name ?? null, source) : format;
  const parsed = useMemo(() => parseItemsInput(source, effective), [source, effective]);
  const draft = {
    submissionKey: "",
    subagent: chosenSubagent || undefined,
    template,
    items: parsed.items,
    maxLiveItems: optionalInt(maxLive),
    maxRunningItems: optionalInt(maxRunning),
  };
  const built = limits
    ? buildSubmission(draft, {
        maxItems: limits.max_items_per_batch,
        maxLiveItems: limits.max_live_items_per_batch,
        maxRunningItems: limits.max_running_items_per_batch,
      })
    : null;
  const problem = fromFiles
    ? (selection?.problem ?? budget.error ?? null)
    : (parsed.error ??
      (parsed.items.length > 0
        ? (built?.error ?? (built?.body && limits ? submissionRefusal(built.body, submissionLimits(limits)) : null) ?? budget.error)
        : null) ??
      null);

  // biome-ignore lint/correctness/useExhaustiveDependencies: any edit of the draft invalidates its key
  useEffect(() => {
    keyRef.current = null;
    setSubmitError(null);
  }, [chosenSubagent, template, source, effective, maxLive, maxRunning, maxTokens, maxCost, fromFiles, glob]);

  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => d?.close();
  }, []);

  const submit = useMutation({
    mutationFn: (body: BatchSubmission) => submitBatch(threadId, body),
    onMutate: () => setSubmitError(null),
    onSuccess: (batch) => {
      qc.setQueryData<BatchProjection[]>(["batches", threadId], (list) => [
        batch,
        ...(list ?? []).filter((b) => b.id !== batch.id),
      ]);
      void qc.invalidateQueries({ queryKey: ["batches", threadId] });
      onCreated(batch);
    },
    onError: (err) => setSubmitError(errorMessage(err)),
  });

  const onFile = async (f: File | undefined) => {
    setFileError(null);
    if (!f) return;
    if (f.size > MAX_FILE_BYTES) {
      setFileError(`${f.name} is larger than ${MAX_FILE_BYTES / 1024 / 1024} MB.`);
      return;
    }
    setFile({ name: f.name, size: f.size, text: await f.text() });
  };

  const canSubmit = (fromFiles ? !!selection && selection.count > 0 : !!built?.body) && !problem && !submit.isPending;
  const previews = parsed.items.slice(0, PREVIEW_COUNT).map((item) => draftPrompt(item, template));

  return (
    <dialog
      ref={ref}
      aria-labelledby={ids.title}
      onClose={onClose}
      data-testid="new-batch-dialog"
      className="m-auto max-h-[calc(100dvh-2rem)] w-[min(40rem,calc(100vw-2rem))] overflow-y-auto rounded-lg bg-white p-0 text-sm text-zinc-900 shadow-xl backdrop:bg-zinc-900/40"
    >
      <form
        method="dialog"
        className="flex flex-col gap-3 p-4"
        onSubmit={(e) => {
          e.preventDefault();
          if (!canSubmit) return;
          keyRef.current ??= newSubmissionKey();
          if (fromFiles)
            submit.mutate({
              submission_key: keyRef.current,
              subagent: chosenSubagent || undefined,
              files: glob,
              prompt_template: template,
              max_live_items: optionalInt(maxLive),
              max_running_items: optionalInt(maxRunning),
              ...budget.body,
            });
          else if (built?.body) submit.mutate({ ...built.body, ...budget.body, submission_key: keyRef.current });
        }}
      >
        <div className="flex items-center gap-2">
          <h3 id={ids.title} className="text-base font-semibold">
            New batch
          </h3>
          <button
            type="button"
            onClick={() => ref.current?.close()}
            className={`${buttonClass.base} ${buttonClass.neutral} ml-auto`}
          >
            Close
          </button>
        </div>

        <ItemsSourceSwitch
          fromFiles={fromFiles}
          onChange={(files) => {
            setFromFiles(files);
            // Swap the untouched default template for the other mode's placeholder.
            if (template === (files ? ITEM_PLACEHOLDER : FILE_PLACEHOLDER)) setTemplate(files ? FILE_PLACEHOLDER : ITEM_PLACEHOLDER);
          }}
        />

        <div className="flex flex-col gap-1">
          <label htmlFor={ids.subagent} className={labelClass}>
            Sub-agent
          </label>
          <select
            id={ids.subagent}
            value={chosenSubagent}
            onChange={(e) => setSubagent(e.target.value)}
            className={inputClass}
          >
            {subagents.map((s) => (
              <option key={s.name} value={s.name}>
                {s.name}
              </option>
            ))}
          </select>
          <p className="text-xs text-zinc-600">{subagents.find((s) => s.name === chosenSubagent)?.description}</p>
        </div>

        <div className="flex flex-col gap-1">
          <label htmlFor={ids.template} className={labelClass}>
            Prompt template
          </label>
          <textarea
            id={ids.template}
            autoFocus
            value={template}
            onChange={(e) => setTemplate(e.target.value)}
            rows={3}
            aria-describedby={ids2.hint}
            className={`${inputClass} font-mono`}
          />
          <p id={ids2.hint} className="text-xs text-zinc-600">
            <code className="font-mono">{fromFiles ? FILE_PLACEHOLDER : ITEM_PLACEHOLDER}</code> is replaced by each{" "}
            {fromFiles ? "file's path." : "item."}
            <span hidden={fromFiles}>
              {" "}
              Items with their own <code className="font-mono">prompt</code> (JSONL or a CSV prompt column) are used as
              written.
            </span>
          </p>
        </div>

        {fromFiles ? (
          <FilesBatchSource threadId={threadId} glob={glob} template={template} onGlobChange={setGlob} onSelection={setSelection} />
        ) : null}

        <div className="flex flex-col gap-1" hidden={fromFiles}>
          <label htmlFor={ids.items} className={labelClass}>
            Items
          </label>
          <textarea
            id={ids.items}
            value={file ? "" : text}
            onChange={(e) => setText(e.target.value)}
            disabled={!!file}
            rows={6}
            placeholder={file ? `Using ${file.name}` : "One item per line (or paste JSONL / CSV)"}
            className={`${inputClass} font-mono`}
          />
          <div className="flex flex-wrap items-center gap-2">
            <label htmlFor={ids.file} className={labelClass}>
              Upload items file
            </label>
            <input
              id={ids.file}
              type="file"
              accept=".txt,.csv,.jsonl,.ndjson,text/plain,text/csv,application/x-ndjson"
              onChange={(e) => {
                void onFile(e.target.files?.[0]);
                e.target.value = "";
              }}
              className="max-w-full text-xs file:mr-2 file:rounded-md file:border-0 file:bg-zinc-100 file:px-2 file:py-1 file:text-zinc-800 hover:file:bg-zinc-200"
            />
            {file ? (
              <span className="flex items-center gap-2 text-xs text-zinc-700">
                <span data-testid="new-batch-file">
                  {file.name} ({Math.max(1, Math.round(file.size / 1024))} KB)
                </span>
                <button
                  type="button"
                  onClick={() => setFile(null)}
                  className={`${buttonClass.base} ${buttonClass.neutral} px-2 py-0.5 text-xs`}
                >
                  Remove file
                </button>
              </span>
            ) : null}
          </div>
          {fileError ? (
            <p role="alert" className="text-xs text-red-700">
              {fileError}
            </p>
          ) : null}
          <div className="flex items-center gap-2">
            <label htmlFor={ids2.format} className={labelClass}>
              Format
            </label>
            <select
              id={ids2.format}
              value={format}
              onChange={(e) => setFormat(e.target.value as ItemsFormat | "auto")}
              className="rounded-md border border-zinc-300 bg-white px-2 py-1 text-xs"
            >
              <option value="auto">Detect ({FORMAT_LABEL[effective]})</option>
              <option value="lines">One item per line</option>
              <option value="jsonl">JSONL</option>
              <option value="csv">CSV</option>
            </select>
          </div>
        </div>

        <details className="rounded-md border border-zinc-200 px-2 py-1">
          <summary className="cursor-pointer text-xs font-medium text-zinc-700">Limits and budget</summary>
          <div className="grid grid-cols-1 gap-2 py-2 sm:grid-cols-2">
            <div className="flex flex-col gap-1">
              <label htmlFor={ids2.live} className={labelClass}>
                Max live items
              </label>
              <input
                id={ids2.live}
                type="number"
                min={1}
                max={limits?.max_live_items_per_batch}
                inputMode="numeric"
                value={maxLive}
                onChange={(e) => setMaxLive(e.target.value)}
                placeholder={limits ? `default ${limits.default_max_live_items}` : ""}
                className={inputClass}
              />
            </div>
            <div className="flex flex-col gap-1">
              <label htmlFor={ids2.running} className={labelClass}>
                Max running items
              </label>
              <input
                id={ids2.running}
                type="number"
                min={1}
                max={limits?.max_running_items_per_batch}
                inputMode="numeric"
                value={maxRunning}
                onChange={(e) => setMaxRunning(e.target.value)}
                placeholder={limits ? `default ${limits.default_max_running_items}` : ""}
                className={inputClass}
              />
            </div>
          </div>
          <BudgetFields
            tokens={maxTokens}
            cost={maxCost}
            onTokens={setMaxTokens}
            onCost={setMaxCost}
            inputClass={inputClass}
            labelClass={labelClass}
          />
        </details>

        <section aria-labelledby={ids2.count} className="flex flex-col gap-1 rounded-md bg-zinc-50 p-2" hidden={fromFiles}>
          <p id={ids2.count} data-testid="new-batch-count" aria-live="polite" className="font-medium tabular-nums">
            {formatCount(parsed.items.length)} {parsed.items.length === 1 ? "item" : "items"}
            {limits ? (
              <span className="font-normal text-zinc-600"> (at most {formatCount(limits.max_items_per_batch)})</span>
            ) : null}
          </p>
          {previews.length > 0 ? (
            <ol aria-label="First prompts" className="flex list-decimal flex-col gap-1 pl-5 text-xs text-zinc-700">
              {previews.map((p, i) => (
                <li key={i} data-testid="new-batch-preview" className="break-words whitespace-pre-wrap">
                  {p.length > PREVIEW_CHARS ? `${p.slice(0, PREVIEW_CHARS)}…` : p}
                </li>
              ))}
            </ol>
          ) : (
            <p className="text-xs text-zinc-600">Add items to see the first prompts.</p>
          )}
          {parsed.errors.length > 0 ? (
            <div role="alert" data-testid="new-batch-errors" className="text-xs text-red-700">
              <p className="font-medium">
                {parsed.errorCount === 1 ? "1 row needs" : `${formatCount(parsed.errorCount)} rows need`} fixing before the
                batch can start{parsed.errorCount > parsed.errors.length ? ` (the first ${parsed.errors.length}):` : ":"}
              </p>
              <ul className="mt-0.5 list-disc pl-4">
                {parsed.errors.map((e) => (
                  <li key={e}>{e}</li>
                ))}
              </ul>
            </div>
          ) : problem ? (
            <p role="alert" className="text-xs text-red-700">
              {problem}
            </p>
          ) : null}
        </section>

        {submitError ? (
          <p role="alert" className="rounded-md bg-red-50 px-2 py-1.5 text-xs text-red-800 ring-1 ring-red-200 ring-inset">
            {submitError}
          </p>
        ) : null}

        <div className="flex justify-end gap-2">
          <button type="submit" disabled={!canSubmit} className={`${buttonClass.base} ${buttonClass.primary}`}>
            {submit.isPending ? <Spinner /> : null}
            Start batch
          </button>
        </div>
      </form>
    </dialog>
  );
}

/** Items typed or uploaded here, or the thread's workspace files. */
function ItemsSourceSwitch({ fromFiles, onChange }: { fromFiles: boolean; onChange: (fromFiles: boolean) => void }) {
  const option = (files: boolean, label: string) => (
    <label
      className={`flex cursor-pointer items-center gap-1.5 rounded px-2 py-1 text-xs font-medium has-[:focus-visible]:outline-2 has-[:focus-visible]:outline-sky-600 ${fromFiles === files ? "bg-white text-zinc-900 shadow-xs" : "text-zinc-600"}`}
    >
      <input type="radio" name="items-source" className="sr-only" checked={fromFiles === files} onChange={() => onChange(files)} />
      {label}
    </label>
  );
  return (
    <fieldset className="flex w-fit gap-1 rounded-md bg-zinc-100 p-1">
      <legend className="sr-only">Source of items</legend>
      {option(false, "Item list")}
      {option(true, "From files")}
    </fieldset>
  );
}
