"use client";

import { useQuery } from "@tanstack/react-query";
import Link from "next/link";
import { useId } from "react";
import { type ExamplesRequest, type GoldenSetRef, type GoldenSetSummary, MAX_EXAMPLES } from "@/lib/api/golden-sets";
import { formatCount } from "@/lib/format";
import { fetchGoldenItems, fetchGoldenSets, goldenKeys } from "@/components/golden-sets/api";
import { ErrorText } from "../ui";
import { LabelledSelect, NumberInput } from "@/components/ui/field";
import { FieldPlaceholders } from "./text-area";

/** A golden set as the dialog holds it: the set, and a version (null: the newest when the batch starts). */
export interface GoldenChoice {
  setId: string;
  version: number | null;
}

/** The person's golden sets, for the dialog's choices (read once the dialog opens). */
export function useGoldenSets() {
  return useQuery({ queryKey: goldenKeys.list, queryFn: ({ signal }) => fetchGoldenSets(signal) });
}

/** The set chosen, else the newest changed one (the list's first). */
export function chosenSet(sets: readonly GoldenSetSummary[] | undefined, setId: string): GoldenSetSummary | undefined {
  return sets?.find((s) => s.id === setId) ?? sets?.[0];
}

/** `golden_set` of a submission: the set, with its version when one was picked. */
export function goldenSetRef(set: GoldenSetSummary, version: number | null): GoldenSetRef {
  return version === null ? { id: set.id } : { id: set.id, version };
}

function SetAndVersion({
  sets,
  value,
  onChange,
  setLabel,
}: {
  sets: readonly GoldenSetSummary[];
  value: GoldenChoice;
  onChange: (next: GoldenChoice) => void;
  setLabel: string;
}) {
  const set = chosenSet(sets, value.setId);
  return (
    <div className="flex flex-wrap items-end gap-2">
      <LabelledSelect
        label={setLabel}
        className="flex min-w-0 flex-1 basis-56 flex-col gap-1"
        value={set?.id ?? ""}
        onChange={(e) => onChange({ setId: e.target.value, version: null })}
      >
        {sets.map((s) => (
          <option key={s.id} value={s.id}>
            {s.name} ({formatCount(s.items)} items)
          </option>
        ))}
      </LabelledSelect>
      <LabelledSelect
        label="Version"
        className="flex w-40 shrink-0 flex-col gap-1"
        value={value.version === null ? "" : String(value.version)}
        onChange={(e) => onChange({ ...value, setId: set?.id ?? value.setId, version: e.target.value === "" ? null : Number(e.target.value) })}
      >
        <option value="">Newest (v{set?.version ?? "?"})</option>
        {Array.from({ length: set?.version ?? 0 }, (_, i) => (set?.version ?? 0) - i).map((v) => (
          <option key={v} value={v}>
            v{v}
          </option>
        ))}
      </LabelledSelect>
    </div>
  );
}

/** Where a person without a set is sent to make one. */
function NoSets({ loading, error }: { loading: boolean; error: unknown }) {
  if (error) return <ErrorText error={error} />;
  return (
    <p className="text-xs text-zinc-600">
      {loading ? (
        "Loading your golden sets…"
      ) : (
        <>
          You have no golden set yet: save reviewed answers as one in{" "}
          <Link href="/review" className="font-medium text-sky-800 underline underline-offset-2">
            Review
          </Link>
          .
        </>
      )}
    </p>
  );
}

/**
 * "Golden set" as the items: the set's version's items, each with its `expected` answer, which
 * the `golden` check compares with. Shows the items' fields (what the template can name).
 */
export function GoldenSetItems({ value, onChange }: { value: GoldenChoice; onChange: (next: GoldenChoice) => void }) {
  const sets = useGoldenSets();
  const set = chosenSet(sets.data, value.setId);
  const version = value.version ?? set?.version ?? 0;
  // The first items say what the template can name (an item's fields, or its text as {{item}}).
  const first = useQuery({
    queryKey: [...goldenKeys.items(set?.id ?? "", version), "first"],
    queryFn: ({ signal }) => fetchGoldenItems(set!.id, version, null, signal),
    enabled: !!set,
    staleTime: 60_000,
  });
  const fields = [...new Set((first.data?.items ?? []).flatMap((i) => Object.keys(i.fields ?? {})))];
  if (!sets.data?.length) return <NoSets loading={sets.isPending} error={sets.error} />;
  return (
    <div className="flex flex-col gap-1" data-testid="golden-items-source">
      <SetAndVersion sets={sets.data} value={value} onChange={onChange} setLabel="Golden set" />
      <p className="text-xs text-zinc-600">
        {set ? `${formatCount(set.items)} items of ${set.name}` : ""}
        {fields.length > 0 ? (
          <>
            {" "}
            with the fields{" "}
            <FieldPlaceholders fields={fields} />
          </>
        ) : null}
        . Each answer is checked against the set&apos;s expected one (the <code className="font-mono">golden</code> check).
      </p>
    </div>
  );
}

/** Examples as the dialog holds them: off, or a set, a version and a count (as typed). */
export interface ExamplesDraft {
  on: boolean;
  choice: GoldenChoice;
  count: string;
}

export const NO_EXAMPLES: ExamplesDraft = { on: false, choice: { setId: "", version: null }, count: "5" };

export function examplesDraftOf(examples: ExamplesRequest | null | undefined): ExamplesDraft {
  if (!examples) return NO_EXAMPLES;
  return { on: true, choice: { setId: examples.golden_set, version: examples.version ?? null }, count: String(examples.count) };
}

/** `examples` of the submission (null: none), or what is wrong with the draft. */
export function examplesOf(
  draft: ExamplesDraft,
  sets: readonly GoldenSetSummary[] | undefined,
): { value: ExamplesRequest | null } | { error: string } {
  if (!draft.on) return { value: null };
  const set = chosenSet(sets, draft.choice.setId);
  if (!set) return { error: "Examples: choose a golden set (you have none yet)." };
  const count = Number(draft.count);
  if (draft.count.trim() === "" || !Number.isInteger(count) || count < 1 || count > MAX_EXAMPLES)
    return { error: `Examples: a count from 1 to ${MAX_EXAMPLES}.` };
  const size = draft.choice.version === null || draft.choice.version === set.version ? set.items : null;
  if (size !== null && count > size) return { error: `Examples: ${set.name} holds ${formatCount(size)} items, fewer than ${count}.` };
  return { value: { golden_set: set.id, ...(draft.choice.version === null ? {} : { version: draft.choice.version }), count } };
}

/**
 * "Examples": a golden set's answers shown to the model before each item, as input → answer
 * pairs in the prompt's shared prefix (read once by the provider's prompt cache). An item is never
 * its own example.
 */
export function ExamplesField({ draft, onChange, error }: { draft: ExamplesDraft; onChange: (next: ExamplesDraft) => void; error?: string | null }) {
  const onId = useId();
  const sets = useGoldenSets();
  return (
    <fieldset className="flex flex-col gap-1.5" data-testid="examples-field">
      <legend className="sr-only">Examples</legend>
      <label htmlFor={onId} className="flex items-center gap-2 text-xs font-medium text-zinc-700">
        <input id={onId} type="checkbox" checked={draft.on} onChange={(e) => onChange({ ...draft, on: e.target.checked })} />
        Show the model examples from a golden set
      </label>
      {draft.on ? (
        sets.data?.length ? (
          <div className="flex flex-col gap-2 pl-6">
            <SetAndVersion sets={sets.data} value={draft.choice} onChange={(choice) => onChange({ ...draft, choice })} setLabel="Examples from" />
            <span className="flex items-center gap-2 text-xs text-zinc-700">
              <NumberInput
                aria-label="Number of examples"
                min={1}
                max={MAX_EXAMPLES}
                value={draft.count}
                onChange={(count) => onChange({ ...draft, count })}
                invalid={!!error}
              />
              examples before each item (an item never sees itself)
            </span>
          </div>
        ) : (
          <div className="pl-6">
            <NoSets loading={sets.isPending} error={sets.error} />
          </div>
        )
      ) : null}
      {error ? <ErrorText error={error} /> : null}
    </fieldset>
  );
}
