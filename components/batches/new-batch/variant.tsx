"use client";

import { fieldClass, LabelledSelect, Options } from "@/components/ui/field";
import type { Check, OutputSchema, Verdict } from "@/lib/api/batch-data";
import type { BatchProjection, ItemStatus, ReviewPolicy } from "@/lib/api/batches";
import { ApiError } from "@/lib/api/client";
import type { ExamplesRequest } from "@/lib/api/golden-sets";
import type { VariantDraft, VariantRequest } from "@/lib/api/variants";
import { titleFrom } from "@/lib/batch-title";
import { formatCount, formatUsd } from "@/lib/format";
import { errorMessage } from "../shared";
import { ErrorText, shortId } from "../ui";
import { relabelServerMessage } from "./typed-input";

/**
 * The New batch dialog as "Run a variant…": the same dialog prefilled from GET .../variant, its
 * items the original's (so the item list gives way to a line saying so, and a choice of which),
 * a Model choice, and a submission to POST .../variant carrying only what the person changed.
 */

/** The batch a variant re-runs and the settings it starts from. */
export interface VariantOf {
  batch: BatchProjection;
  draft: VariantDraft;
}

/** Which of the original's items a variant runs (`only`): all, the failed ones, or those whose checks failed. */
export type VariantItemsChoice = "all" | "failed" | "failed_verdict";

const ONLY: Record<Exclude<VariantItemsChoice, "all">, { status?: ItemStatus[]; verdict?: Verdict }> = {
  failed: { status: ["failed"] },
  failed_verdict: { verdict: "failed" },
};

/** What the dialog holds when it submits a variant. */
export interface VariantValues {
  subagent: string;
  model: string;
  template: string;
  /** null: the field was emptied, and the variant drops the original's schema. */
  outputSchema: OutputSchema | null | undefined;
  checks: Check[] | undefined;
  maxRunningItems: number | undefined;
  items: VariantItemsChoice;
  /** null: none (the variant drops the original's policy). */
  review: ReviewPolicy | null;
  /** null: none (the variant drops the original's examples). */
  examples: ExamplesRequest | null;
}

const same = (x: unknown, y: unknown) => JSON.stringify(x ?? null) === JSON.stringify(y ?? null);

/**
 * The variant request (its key aside): only what differs from the draft, since every setting a
 * request leaves out is the original's (a changed sub-agent then keeps the original's model
 * unless the model is changed too, as the server reads it).
 */
export function variantChanges(draft: VariantDraft, v: VariantValues): Omit<VariantRequest, "submission_key"> {
  const out: Omit<VariantRequest, "submission_key"> = {};
  if (v.subagent && v.subagent !== draft.subagent) out.subagent = v.subagent;
  if (v.model && v.model !== draft.model) out.model = v.model;
  if (v.template.trim() !== "" && v.template !== (draft.prompt_template ?? "")) out.prompt_template = v.template;
  if (v.outputSchema !== undefined && !same(v.outputSchema, draft.output_schema)) out.output_schema = v.outputSchema;
  // Emptied, the checks field asks for none.
  if (!same(v.checks ?? [], draft.checks)) out.checks = v.checks ?? [];
  if (v.maxRunningItems !== undefined && v.maxRunningItems !== draft.max_running_items) out.max_running_items = v.maxRunningItems;
  if (!same(v.review, draft.review)) out.review = v.review;
  if (!same(v.examples, draft.examples)) out.examples = v.examples;
  if (v.items !== "all") out.only = ONLY[v.items];
  return out;
}

/** A problem the variant's own fields have before anything is sent (null: none). An emptied schema is not one: it drops the schema. */
export function variantProblems(draft: VariantDraft, v: Pick<VariantValues, "template">) {
  return {
    template: draft.prompt_template !== null && v.template.trim() === "" ? "Prompt template: must not be empty." : null,
  };
}

/** The dialog's fields a server refusal can name; anything else shows above Start. */
export type VariantField = "template" | "schema" | "checks" | "model" | "subagent" | "items" | "pilot" | "review" | "examples" | "other";

/** Where a 400 belongs: its locator ("checks.1.pattern: …") names the field, in the dialog's words. */
export function serverFieldError(err: unknown): { field: VariantField; message: string } | null {
  if (!err) return null;
  const message = errorMessage(err);
  if (!(err instanceof ApiError) || err.status !== 400) return { field: "other", message };
  const locator = /^([a-z_]+)[.:\s]/.exec(message)?.[1] ?? "";
  const field: VariantField =
    locator === "prompt_template"
      ? "template"
      : locator === "output_schema"
        ? "schema"
        : locator === "checks"
          ? "checks"
          : locator === "model"
            ? "model"
            : locator === "subagent"
              ? "subagent"
              : locator === "only" || locator === "items"
                ? "items"
                : locator === "pilot"
                  ? "pilot"
                  : locator === "review"
                    ? "review"
                    : locator === "examples"
                      ? "examples"
                      : "other";
  return { field, message: field === "schema" || field === "checks" ? relabelServerMessage(message) : message };
}

/** In place of the item list: the original's items, and which of them run again. */
export function VariantItems({
  variantOf,
  value,
  onChange,
  error,
}: {
  variantOf: VariantOf;
  value: VariantItemsChoice;
  onChange: (value: VariantItemsChoice) => void;
  error: string | null;
}) {
  const { batch, draft } = variantOf;
  const title = titleFrom(draft.prompt_template, draft.subagent);
  const options: { value: VariantItemsChoice; label: string; n: number }[] = [
    { value: "all", label: `All ${formatCount(batch.total)} items`, n: batch.total },
    { value: "failed", label: `Only the ${formatCount(batch.counts.failed)} that failed`, n: batch.counts.failed },
    { value: "failed_verdict", label: `Only the ${formatCount(batch.verdicts.failed)} whose checks failed`, n: batch.verdicts.failed },
  ];
  const offered = options.filter((o) => o.value === "all" || o.n > 0 || o.value === value);
  return (
    <section aria-label="Items" data-testid="variant-items" className="flex flex-col gap-1.5 rounded-md bg-zinc-50 p-2">
      <p data-testid="variant-items-line" className="text-sm wrap-anywhere">
        Same {formatCount(batch.total)} {batch.total === 1 ? "item" : "items"} as <span className="font-medium">{title}</span>{" "}
        <span className="font-mono text-xs text-zinc-600">({shortId(batch.id)})</span>
      </p>
      {offered.length > 1 ? (
        <LabelledSelect
          label="Run"
          className="flex items-center gap-2"
          selectClassName={`${fieldClass} min-w-0 flex-1`}
          value={value}
          onChange={(e) => onChange(e.target.value as VariantItemsChoice)}
        >
          <Options options={offered} />
        </LabelledSelect>
      ) : null}
      <p className="text-xs text-zinc-600">
        Item keys, fields and expected values as before, so the two runs compare item by item. The original cost{" "}
        {formatUsd(batch.cost_usd)}.
      </p>
      {error ? <ErrorText error={error} /> : null}
    </section>
  );
}

/** The catalog model every item of the variant runs on. */
/** The model a batch runs on. With `defaultLabel`, "" is an option: the sub-agent's own model. */
export function ModelField({
  models,
  value,
  onChange,
  error,
  defaultLabel,
}: {
  models: string[];
  value: string;
  onChange: (name: string) => void;
  error: string | null;
  defaultLabel?: string;
}) {
  const names = models.includes(value) || (value === "" && defaultLabel) ? models : [value, ...models];
  return (
    <LabelledSelect
      label="Model"
      value={value}
      onChange={(e) => onChange(e.target.value)}
      aria-invalid={error ? true : undefined}
      after={error ? <ErrorText error={error} /> : null}
    >
      {defaultLabel ? <option value="">{defaultLabel}</option> : null}
      <Options options={names.map((m) => ({ value: m, label: m }))} />
    </LabelledSelect>
  );
}
