import { useId } from "react";
import { fieldClass, labelClass } from "../budget";
import { CHECKS_EXAMPLE, OUTPUT_SCHEMA_EXAMPLE } from "./typed-input";

/** "Output and checks": an optional JSON Schema for each answer, and the checks that grade it. */
export function TypedOutputSection({
  schema,
  checks,
  onSchema,
  onChecks,
  schemaError,
  checksError,
  expectedColumn,
}: {
  schema: string;
  checks: string;
  onSchema: (text: string) => void;
  onChecks: (text: string) => void;
  schemaError: string | null;
  checksError: string | null;
  /** Whether the items carry `expected` (an equals check compares with it). */
  expectedColumn: boolean;
}) {
  const ids = { schema: useId(), schemaHint: useId(), checks: useId(), checksHint: useId() };
  return (
    <details className="rounded-md border border-zinc-200 px-2 py-1">
      <summary className="cursor-pointer text-xs font-medium text-zinc-700">Output and checks</summary>
      <div className="flex flex-col gap-3 py-2">
        <div className="flex flex-col gap-1">
          <label htmlFor={ids.schema} className={labelClass}>
            Output schema
          </label>
          <textarea
            id={ids.schema}
            value={schema}
            onChange={(e) => onSchema(e.target.value)}
            rows={3}
            spellCheck={false}
            placeholder={OUTPUT_SCHEMA_EXAMPLE}
            aria-describedby={ids.schemaHint}
            aria-invalid={schemaError ? true : undefined}
            className={`${fieldClass} font-mono text-xs`}
          />
          <p id={ids.schemaHint} className="text-xs text-zinc-600">
            Optional. A JSON Schema: each item answers one JSON value valid against it, and its top-level properties become
            the Results table's columns.
          </p>
          {schemaError ? (
            <p role="alert" className="text-xs text-red-700">
              {schemaError}
            </p>
          ) : null}
        </div>
        <div className="flex flex-col gap-1">
          <label htmlFor={ids.checks} className={labelClass}>
            Checks
          </label>
          <textarea
            id={ids.checks}
            value={checks}
            onChange={(e) => onChecks(e.target.value)}
            rows={3}
            spellCheck={false}
            placeholder={CHECKS_EXAMPLE}
            aria-describedby={ids.checksHint}
            aria-invalid={checksError ? true : undefined}
            className={`${fieldClass} font-mono text-xs`}
          />
          <p id={ids.checksHint} className="text-xs text-zinc-600">
            Optional. A JSON array of checks: <code className="font-mono">regex</code> (pattern, path?),{" "}
            <code className="font-mono">equals</code> (path, expected_path?) or <code className="font-mono">judge</code>{" "}
            (rubric, threshold?); <code className="font-mono">on_fail</code> "flag" or "retry".
            {expectedColumn ? " The items' expected values are what equals compares with." : ""}
          </p>
          {checksError ? (
            <p role="alert" className="text-xs text-red-700">
              {checksError}
            </p>
          ) : null}
        </div>
      </div>
    </details>
  );
}
