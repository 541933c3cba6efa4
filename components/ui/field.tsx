import { type InputHTMLAttributes, type ReactNode, type SelectHTMLAttributes, useId } from "react";

/** A labelled text input (the label names the field for assistive technology and tests). */
export function Field({ label, id, ...props }: InputHTMLAttributes<HTMLInputElement> & { label: string; id: string }) {
  return (
    <div className="space-y-1.5">
      <label htmlFor={id} className="block text-sm font-medium text-zinc-700">
        {label}
      </label>
      <input
        id={id}
        className="block h-10 w-full rounded-lg border border-zinc-300 bg-white px-3 text-sm text-zinc-900 shadow-xs placeholder:text-zinc-400 focus:border-zinc-500 focus:ring-2 focus:ring-zinc-200 focus:outline-none"
        {...props}
      />
    </div>
  );
}

/** A select's options, each a value and what it says. */
export function Options({ options }: { options: readonly { value: string; label: string }[] }) {
  return options.map((o) => (
    <option key={o.value} value={o.value}>
      {o.label}
    </option>
  ));
}

/** The compact controls of panels and dialogs (smaller than Field's): a full-width input or select, and its label. */
export const fieldClass =
  "w-full rounded-md border border-zinc-300 bg-white px-2 py-1.5 text-sm text-zinc-900 placeholder:text-zinc-400 focus-visible:outline-2 focus-visible:outline-sky-600 disabled:bg-zinc-100 disabled:text-zinc-500";
export const labelClass = "text-xs font-medium text-zinc-700";

/**
 * A label and its select. Stacked by default; `className` lays the pair out otherwise (a row),
 * `selectClassName` sizes the select, and `children` are its options. `after` follows the select
 * inside the same box (a description, an error).
 */
export function LabelledSelect({
  label,
  className = "flex flex-col gap-1",
  selectClassName = fieldClass,
  after,
  children,
  ...props
}: Omit<SelectHTMLAttributes<HTMLSelectElement>, "className"> & {
  label: ReactNode;
  selectClassName?: string;
  className?: string;
  after?: ReactNode;
}) {
  const id = useId();
  return (
    <div className={className}>
      <label htmlFor={id} className={labelClass}>
        {label}
      </label>
      <select id={id} className={selectClassName} {...props}>
        {children}
      </select>
      {after}
    </div>
  );
}

/**
 * A short number (a count, a percent) inside a sentence: 5rem wide, its value as typed.
 * `step` "1" asks phones for the numeric keypad, anything else for decimals.
 */
export function NumberInput({
  value,
  onChange,
  step = "1",
  invalid,
  ...props
}: Omit<InputHTMLAttributes<HTMLInputElement>, "type" | "value" | "onChange" | "className"> & {
  value: string;
  onChange: (value: string) => void;
  step?: string;
  invalid?: boolean;
}) {
  return (
    // A flex box, so the input (w-full) fills exactly its 5rem.
    <span className="flex w-20 shrink-0">
      <input
        type="number"
        step={step}
        inputMode={step === "1" ? "numeric" : "decimal"}
        value={value}
        onChange={(e) => onChange(e.target.value)}
        aria-invalid={invalid || undefined}
        className={fieldClass}
        {...props}
      />
    </span>
  );
}
