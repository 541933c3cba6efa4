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

/** "Output and checks": an optional JSON Schema for each answer, and the checks that grade it. */
export function TypedOutputSection({
  schema,
  checks,
  onSchema,
  onChecks,
  schemaError,
  checksError,
  expectedColumn,
  open = false,
}: {
  schema: string;
  checks: string;
  onSchema: (text: string) => void;
  onChecks: (text: string) => void;
  schemaError: string | null;
  checksError: string | null;
  /** Whether the items carry `expected` (an equals check compares with it). */
  expectedColumn: boolean;
  /** Opened from the start (a variant's prefilled schema and checks are shown, not folded away). */
  open?: boolean;
}) {
  return (
    <details open={open || undefined} className="rounded-md border border-zinc-200 px-2 py-1">
      <summary className="cursor-pointer text-xs font-medium text-zinc-700">Output and checks</summary>
      <div className="flex flex-col gap-3 py-2">
        <TextArea
          label="Output schema"
          value={schema}
          onChange={(e) => onSchema(e.target.value)}
          spellCheck={false}
          placeholder={OUTPUT_SCHEMA_EXAMPLE}
          className="text-xs"
          error={schemaError}
          hint="Optional. A JSON Schema: each item answers one JSON value valid against it, and its top-level properties become the Results table's columns."
        />
        <TextArea
          label="Checks"
          value={checks}
          onChange={(e) => onChecks(e.target.value)}
          spellCheck={false}
          placeholder={CHECKS_EXAMPLE}
          className="text-xs"
          error={checksError}
          hint={
            <>
              Optional. A JSON array of checks: <code className="font-mono">regex</code> (pattern, path?),{" "}
              <code className="font-mono">equals</code> (path, expected_path?) or <code className="font-mono">judge</code>{" "}
              (rubric, threshold?); <code className="font-mono">on_fail</code> "flag" or "retry".
              {expectedColumn ? " The items' expected values are what equals compares with." : ""}
            </>
          }
        />
      </div>
    </details>
  );
}
