import { useId, useState } from "react";
import { buttonClasses } from "@/components/ui/button";
import { ErrorText } from "../ui";
import { fieldClass, LabelledSelect, labelClass } from "@/components/ui/field";
import type { ItemsFormat } from "./items-input";

const MAX_FILE_BYTES = 20 * 1024 * 1024;
const FORMAT_LABEL: Record<ItemsFormat, string> = { lines: "one item per line", jsonl: "JSONL", csv: "CSV" };

export interface ItemsFile {
  name: string;
  size: number;
  text: string;
}

/** Where a new batch's items come from: typed or uploaded here, the thread's workspace files, or a golden set. */
export type ItemsSource = "list" | "files" | "golden";

export function ItemsSourceSwitch({ source, onChange }: { source: ItemsSource; onChange: (source: ItemsSource) => void }) {
  const option = (value: ItemsSource, label: string) => (
    <label
      className={`flex cursor-pointer items-center gap-1.5 rounded px-2 py-1 text-xs font-medium has-[:focus-visible]:outline-2 has-[:focus-visible]:outline-sky-600 ${source === value ? "bg-white text-zinc-900 shadow-xs" : "text-zinc-600"}`}
    >
      <input type="radio" name="items-source" className="sr-only" checked={source === value} onChange={() => onChange(value)} />
      {label}
    </label>
  );
  return (
    <fieldset className="flex w-fit gap-1 rounded-md bg-zinc-100 p-1">
      <legend className="sr-only">Source of items</legend>
      {option("list", "Item list")}
      {option("files", "From files")}
      {option("golden", "Golden set")}
    </fieldset>
  );
}

/** The item list: pasted text or an uploaded file, and the format it is read in. */
export function ItemsInput({
  hidden,
  text,
  onText,
  file,
  onFile,
  format,
  effective,
  onFormat,
}: {
  hidden: boolean;
  text: string;
  onText: (text: string) => void;
  file: ItemsFile | null;
  onFile: (file: ItemsFile | null) => void;
  format: ItemsFormat | "auto";
  effective: ItemsFormat;
  onFormat: (format: ItemsFormat | "auto") => void;
}) {
  const ids = { items: useId(), file: useId() };
  const [fileError, setFileError] = useState<string | null>(null);
  const read = async (f: File | undefined) => {
    setFileError(null);
    if (!f) return;
    if (f.size > MAX_FILE_BYTES) {
      setFileError(`${f.name} is larger than ${MAX_FILE_BYTES / 1024 / 1024} MB.`);
      return;
    }
    onFile({ name: f.name, size: f.size, text: await f.text() });
  };
  return (
    <div className="flex flex-col gap-1" hidden={hidden}>
      <label htmlFor={ids.items} className={labelClass}>
        Items
      </label>
      <textarea
        id={ids.items}
        value={file ? "" : text}
        onChange={(e) => onText(e.target.value)}
        disabled={!!file}
        rows={6}
        placeholder={file ? `Using ${file.name}` : "One item per line (or paste JSONL / CSV)"}
        className={`${fieldClass} font-mono`}
      />
      {/* The browser's own picker would read "No file chosen" beside the chosen file (its value is
          cleared so the same file can be chosen again): it is hidden, and this row says the one state. */}
      <div className="flex flex-wrap items-center gap-2">
        <input
          id={ids.file}
          type="file"
          aria-label="Upload items file"
          accept=".txt,.csv,.jsonl,.ndjson,text/plain,text/csv,application/x-ndjson"
          onChange={(e) => {
            void read(e.target.files?.[0]);
            e.target.value = "";
          }}
          className="peer sr-only"
        />
        <label
          htmlFor={ids.file}
          className={`${buttonClasses("secondary", "xs")} cursor-pointer peer-focus-visible:outline-2 peer-focus-visible:outline-offset-2 peer-focus-visible:outline-zinc-900`}
        >
          {file ? "Choose another file…" : "Upload items file…"}
        </label>
        {file ? (
          <span className="flex items-center gap-2 text-xs text-zinc-700">
            <span data-testid="new-batch-file">
              {file.name} ({Math.max(1, Math.round(file.size / 1024))} KB)
            </span>
            <button type="button" onClick={() => onFile(null)} className={buttonClasses("ghost", "xs")}>
              Remove file
            </button>
          </span>
        ) : (
          <span className="text-xs text-zinc-500">.txt, .csv or .jsonl, up to {MAX_FILE_BYTES / 1024 / 1024} MB</span>
        )}
      </div>
      {fileError ? <ErrorText error={fileError} /> : null}
      <LabelledSelect
        label="Format"
        className="flex items-center gap-2"
        selectClassName="rounded-md border border-zinc-300 bg-white px-2 py-1 text-xs"
        value={format}
        onChange={(e) => onFormat(e.target.value as ItemsFormat | "auto")}
      >
        <option value="auto">Detect ({FORMAT_LABEL[effective]})</option>
        <option value="lines">One item per line</option>
        <option value="jsonl">JSONL</option>
        <option value="csv">CSV</option>
      </LabelledSelect>
    </div>
  );
}
