"use client";

import { type Ref, useState } from "react";

/**
 * The text of a value being edited and its refusal: editing clears the refusal, which a check or
 * the server's 400 sets. `value`, `onChange` and `error` go to ValueEditor as they are.
 */
export function useValueDraft(initial: () => string) {
  const [value, setValue] = useState(initial);
  const [error, setError] = useState<string | null>(null);
  const onChange = (text: string) => {
    setValue(text);
    setError(null);
  };
  return { value, onChange, error, setError };
}

/**
 * A labelled editor for one value (JSON or text) with its refusal under it: the server's 400
 * names the field, and that message shows here, next to what it is about.
 */
export function ValueEditor({
  id,
  label,
  hint,
  value,
  onChange,
  error,
  json,
  ref,
  rows = 8,
}: {
  id: string;
  label: string;
  hint: string;
  value: string;
  onChange: (text: string) => void;
  error: string | null;
  json: boolean;
  ref?: Ref<HTMLTextAreaElement>;
  rows?: number;
}) {
  return (
    <div className="space-y-1">
      <label htmlFor={id} className="block text-sm font-medium text-zinc-700">
        {label}
      </label>
      <p id={`${id}-hint`} className="text-xs text-zinc-500">
        {hint}
      </p>
      <textarea
        id={id}
        ref={ref}
        value={value}
        rows={rows}
        spellCheck={!json}
        aria-invalid={error ? true : undefined}
        aria-describedby={`${id}-hint${error ? ` ${id}-error` : ""}`}
        onChange={(e) => onChange(e.target.value)}
        className={`block w-full resize-y rounded-lg border bg-white px-3 py-2 text-sm text-zinc-900 focus:ring-2 focus:outline-none ${json ? "font-mono text-xs" : ""} ${error ? "border-red-400 focus:ring-red-100" : "border-zinc-300 focus:border-zinc-500 focus:ring-zinc-200"}`}
      />
      {error ? (
        <p id={`${id}-error`} role="alert" className="text-sm wrap-anywhere text-red-700">
          {error}
        </p>
      ) : null}
    </div>
  );
}
