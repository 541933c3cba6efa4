import { formatCount } from "@/lib/format";
import type { ParsedItems } from "./items-input";

const PREVIEW_CHARS = 400;

/** The first prompts a batch will run, each cut to a readable length. */
export function PromptPreviews({ prompts, testId }: { prompts: string[]; testId: string }) {
  return (
    <ol aria-label="First prompts" className="flex list-decimal flex-col gap-1 pl-5 text-xs text-zinc-700">
      {prompts.map((p, i) => (
        <li key={i} data-testid={testId} className="wrap-anywhere whitespace-pre-wrap">
          {p.length > PREVIEW_CHARS ? `${p.slice(0, PREVIEW_CHARS)}…` : p}
        </li>
      ))}
    </ol>
  );
}

/** How many items the draft holds, its first prompts, and every row that must be fixed first. */
export function DraftSummary({
  countId,
  parsed,
  prompts,
  maxItems,
  problem,
}: {
  countId: string;
  parsed: ParsedItems;
  prompts: string[];
  maxItems: number | undefined;
  problem: string | null;
}) {
  const n = parsed.items.length;
  return (
    <section aria-labelledby={countId} className="flex flex-col gap-1 rounded-md bg-zinc-50 p-2">
      <p id={countId} data-testid="new-batch-count" aria-live="polite" className="font-medium tabular-nums">
        {formatCount(n)} {n === 1 ? "item" : "items"}
        {maxItems !== undefined ? <span className="font-normal text-zinc-600"> (at most {formatCount(maxItems)})</span> : null}
      </p>
      {parsed.fields.length > 0 ? (
        <p data-testid="new-batch-fields" className="text-xs text-zinc-700 wrap-anywhere">
          Fields:{" "}
          {parsed.fields.map((f, i) => (
            <span key={f}>
              {i > 0 ? ", " : ""}
              <code className="font-mono">{`{{${f}}}`}</code>
            </span>
          ))}
          {parsed.expected ? " · expected goes to the checks, not the prompt" : ""}
        </p>
      ) : null}
      {prompts.length > 0 ? (
        <PromptPreviews prompts={prompts} testId="new-batch-preview" />
      ) : (
        <p className="text-xs text-zinc-600">Add items to see the first prompts.</p>
      )}
      {parsed.errors.length > 0 ? (
        <div role="alert" data-testid="new-batch-errors" className="text-xs text-red-700">
          <p className="font-medium">
            {parsed.errorCount === 1 ? "1 row needs" : `${formatCount(parsed.errorCount)} rows need`} fixing before the batch
            can start{parsed.errorCount > parsed.errors.length ? ` (the first ${parsed.errors.length}):` : ":"}
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
  );
}
