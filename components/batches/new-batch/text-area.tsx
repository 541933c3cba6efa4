"use client";

import { type ReactNode, type TextareaHTMLAttributes, useId } from "react";
import { fieldClass, labelClass } from "../budget";
import { ErrorText } from "../ui";

/** One of the dialog's longer fields: a labelled textarea (monospace), its hint, and its error when there is one. */
export function TextArea({
  label,
  hint,
  error,
  className = "",
  ...props
}: TextareaHTMLAttributes<HTMLTextAreaElement> & { label: string; hint: ReactNode; error?: string | null }) {
  const ids = { field: useId(), hint: useId() };
  return (
    <div className="flex flex-col gap-1">
      <label htmlFor={ids.field} className={labelClass}>
        {label}
      </label>
      <textarea
        id={ids.field}
        rows={3}
        aria-describedby={ids.hint}
        aria-invalid={error ? true : undefined}
        className={`${fieldClass} font-mono ${className}`}
        {...props}
      />
      <p id={ids.hint} className="text-xs text-zinc-600">
        {hint}
      </p>
      {error ? <ErrorText error={error} /> : null}
    </div>
  );
}
