import Link from "next/link";
import type { ReactNode } from "react";
import type { ReviewEntry } from "@/lib/api/review-queue";
import { inputFields } from "@/lib/result-columns";
import { CheckList } from "@/components/batches/check-mark";
import { FieldList, StatusBadge, VerdictBadge } from "@/components/batches/ui";

/**
 * What a reviewer reads of one queued item: where it comes from, its input, what was expected,
 * the model's answer and how each check judged it (a judge's reason in full). Everything here is
 * data a model or a person wrote: shown as text, never as markup.
 */
export function ReviewItem({ entry }: { entry: ReviewEntry }) {
  const fields = inputFields(entry.input);
  return (
    <div className="min-w-0 space-y-4">
      <header className="min-w-0 space-y-1">
        <Link
          href={`/threads/${entry.thread_id}/batches/${entry.batch_id}/results`}
          data-testid="review-batch-link"
          className="block max-w-full truncate text-sm font-semibold text-sky-800 underline-offset-2 hover:underline focus-visible:outline-2 focus-visible:outline-sky-600"
          title={entry.batch_title}
        >
          {entry.batch_title}
        </Link>
        <p className="flex min-w-0 flex-wrap items-center gap-x-2 gap-y-1 text-xs text-zinc-500">
          <span className="min-w-0 truncate">in {entry.thread_title}</span>
          <span aria-hidden>·</span>
          <span className="min-w-0 font-mono break-all text-zinc-700" data-testid="review-item-key">
            {entry.item_key}
          </span>
          <StatusBadge status={entry.status} />
          {entry.verdict ? <VerdictBadge verdict={entry.verdict} /> : null}
        </p>
      </header>

      <Block title="Input" testId="review-input">
        {fields ? (
          <FieldList fields={fields} className="grid grid-cols-[auto_minmax(0,1fr)] gap-x-3 gap-y-1" />
        ) : (
          <pre className="font-sans whitespace-pre-wrap wrap-anywhere">{entry.input || "—"}</pre>
        )}
      </Block>

      {entry.expected === undefined ? null : (
        <Block title="Expected" testId="review-expected">
          <ValueText value={entry.expected} />
        </Block>
      )}

      <Block title="Output" testId="review-output">
        <ValueText value={entry.output} />
      </Block>

      {entry.reviewed_output === undefined ? null : (
        <Block title="Corrected output (an earlier review)" testId="review-reviewed-output">
          <ValueText value={entry.reviewed_output} />
        </Block>
      )}

      {entry.error ? (
        <Block title="Error" testId="review-error" tone="red">
          <pre className="font-sans whitespace-pre-wrap wrap-anywhere">{entry.error}</pre>
        </Block>
      ) : null}

      {entry.checks.length > 0 ? (
        <Block title="Checks" testId="review-checks">
          <CheckList checks={entry.checks} itemTestId="review-check" />
        </Block>
      ) : null}
    </div>
  );
}

function Block({ title, testId, tone, children }: { title: string; testId: string; tone?: "red"; children: ReactNode }) {
  return (
    <section data-testid={testId} className="min-w-0">
      <h2 className="text-xs font-medium tracking-wide text-zinc-500 uppercase">{title}</h2>
      <div
        className={`mt-1 max-h-80 overflow-y-auto rounded-lg border bg-white p-3 text-sm ${tone === "red" ? "border-red-200 text-red-800" : "border-zinc-200 text-zinc-800"}`}
      >
        {children}
      </div>
    </section>
  );
}

/** A JSON value as indented JSON, a string as its text. */
function ValueText({ value }: { value: unknown }) {
  if (value === null || value === undefined) return <span className="text-zinc-400">none</span>;
  if (typeof value === "string") return <pre className="font-sans whitespace-pre-wrap wrap-anywhere">{value}</pre>;
  return <pre className="font-mono text-xs whitespace-pre-wrap wrap-anywhere">{JSON.stringify(value, null, 2)}</pre>;
}
