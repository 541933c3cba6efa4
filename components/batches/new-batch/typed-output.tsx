import { useEffect, useMemo, useState } from "react";
import type { Check, OutputSchema } from "@/lib/api/batch-data";
import { TextArea } from "./text-area";
import { CHECKS_EXAMPLE, OUTPUT_SCHEMA_EXAMPLE } from "./typed-input";

type Compiler = typeof import("./typed-compile");

/**
 * Whether the schema compiles and the regex checks' patterns compile (RE2), checked in the
 * browser: `pending` until the checker (Ajv and RE2, a chunk of its own) has loaded, which it
 * does only once either field holds something.
 */
export function useTypedCompile(
  schema: OutputSchema | undefined,
  checks: readonly Check[] | undefined,
): { schemaError: string | null; checksError: string | null; pending: boolean } {
  const [compiler, setCompiler] = useState<Compiler | null>(null);
  const needed = schema !== undefined || (checks?.some((c) => c.type === "regex") ?? false);
  useEffect(() => {
    if (!needed || compiler) return;
    let live = true;
    void import("./typed-compile").then((m) => {
      if (live) setCompiler(m);
    });
    return () => {
      live = false;
    };
  }, [needed, compiler]);
  return useMemo(() => {
    if (!needed) return { schemaError: null, checksError: null, pending: false };
    if (!compiler) return { schemaError: null, checksError: null, pending: true };
    return { ...compiler.typedCompileProblems(schema, checks), pending: false };
  }, [needed, compiler, schema, checks]);
}

/** "Output and checks" as typed: JSON text of the schema and of the checks ("" for none). */
export interface TypedDraft {
  schema: string;
  checks: string;
}

const TYPED_FIELDS = [
  {
    key: "schema",
    label: "Output schema",
    example: OUTPUT_SCHEMA_EXAMPLE,
    hint: () =>
      "Optional. A JSON Schema: each item answers one JSON value valid against it, and its top-level properties become the Results table's columns.",
  },
  {
    key: "checks",
    label: "Checks",
    example: CHECKS_EXAMPLE,
    hint: (expectedColumn: boolean) => (
      <>
        Optional. A JSON array of checks: <code className="font-mono">regex</code> (pattern, path?),{" "}
        <code className="font-mono">equals</code> (path, expected_path?) or <code className="font-mono">judge</code>{" "}
        (rubric, threshold?); <code className="font-mono">on_fail</code> "flag" or "retry".
        {expectedColumn ? " The items' expected values are what equals compares with." : ""}
      </>
    ),
  },
] as const;

/** "Output and checks": an optional JSON Schema for each answer, and the checks that grade it. */
export function TypedOutputSection({
  draft,
  onChange,
  errors,
  expectedColumn,
  open = false,
}: {
  draft: TypedDraft;
  onChange: (next: Partial<TypedDraft>) => void;
  errors: Record<keyof TypedDraft, string | null>;
  /** Whether the items carry `expected` (an equals check compares with it). */
  expectedColumn: boolean;
  /** Opened from the start (a variant's prefilled schema and checks are shown, not folded away). */
  open?: boolean;
}) {
  return (
    <details open={open || undefined} className="rounded-md border border-zinc-200 px-2 py-1">
      <summary className="cursor-pointer text-xs font-medium text-zinc-700">Output and checks</summary>
      <div className="flex flex-col gap-3 py-2">
        {TYPED_FIELDS.map((f) => (
          <TextArea
            key={f.key}
            label={f.label}
            value={draft[f.key]}
            onChange={(e) => onChange({ [f.key]: e.target.value })}
            spellCheck={false}
            placeholder={f.example}
            className="text-xs"
            error={errors[f.key]}
            hint={f.hint(expectedColumn)}
          />
        ))}
      </div>
    </details>
  );
}
