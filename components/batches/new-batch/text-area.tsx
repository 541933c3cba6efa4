"use client";

import { type ReactNode, type TextareaHTMLAttributes, useId } from "react";
import { ErrorText } from "../ui";
import { fieldClass, labelClass } from "@/components/ui/field";

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

/** Item fields as the template names them: `{{a}}, {{b}}`. */
export function FieldPlaceholders({ fields }: { fields: readonly string[] }) {
  return fields.map((f, i) => (
    <span key={f}>
      {i > 0 ? ", " : ""}
      <code className="font-mono">{`{{${f}}}`}</code>
    </span>
  ));
}
