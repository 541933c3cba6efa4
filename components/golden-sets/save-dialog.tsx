"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import Link from "next/link";
import { useEffect, useId, useState } from "react";
import { GOLDEN_INCLUDE, GOLDEN_SET_NAME_MAX_CHARS, type GoldenInclude } from "@/lib/api/golden-sets";
import { formatCount } from "@/lib/format";
import { ErrorText, shortId } from "@/components/batches/ui";
import { buttonClasses } from "@/components/ui/button";
import { fieldClass, LabelledSelect, labelClass } from "@/components/ui/field";
import { ModalForm } from "@/components/ui/modal-form";
import { Spinner } from "@/components/ui/spinner";
import { addBatchToGoldenSet, createGoldenSetFromBatch, fetchGoldenSets, goldenKeys, goldenSetPagePath } from "./api";

/** A batch the reviewed answers can come from: its id and what people call it. */
export interface ReviewedBatch {
  id: string;
  title: string;
}

const INCLUDE_LABELS: Record<GoldenInclude, string> = {
  accepted: "Accepted answers (the model's answer stands)",
  corrected: "Corrected answers (the person's answer)",
};

/** What a save did: the set, its new version and how its items changed. */
interface Saved {
  id: string;
  name: string;
  version: number;
  items: number;
  added: number;
  replaced: number;
}

/**
 * "Save reviewed as golden set…": a batch's reviewed items (accepted: the model's answer;
 * corrected: the person's) as a new set (POST /api/golden-sets) or as a new version of one of the
 * person's sets (POST .../add). Shows the version made and links to the set's page.
 */
export function SaveGoldenSetDialog({
  batches,
  initialBatchId,
  onClose,
}: {
  /** The batches to choose from (one: no choice shown). */
  batches: readonly ReviewedBatch[];
  initialBatchId: string;
  onClose: () => void;
}) {
  const qc = useQueryClient();
  const ids = { name: useId(), set: useId() };
  const [batchId, setBatchId] = useState(initialBatchId);
  const [target, setTarget] = useState<"new" | "existing">("new");
  const [name, setName] = useState("");
  const [setId, setSetId] = useState("");
  const [include, setInclude] = useState<GoldenInclude[]>([...GOLDEN_INCLUDE]);
  const sets = useQuery({ queryKey: goldenKeys.list, queryFn: ({ signal }) => fetchGoldenSets(signal) });
  const chosenSet = sets.data?.find((s) => s.id === setId) ?? sets.data?.[0];

  const save = useMutation({
    mutationFn: async (): Promise<Saved> => {
      if (target === "new") {
        const created = await createGoldenSetFromBatch(name.trim(), batchId, include);
        return { ...created, added: created.items, replaced: 0 };
      }
      const set = chosenSet!;
      const added = await addBatchToGoldenSet(set.id, batchId, include);
      return { id: set.id, name: set.name, ...added };
    },
    onSuccess: (saved) => {
      void qc.invalidateQueries({ queryKey: goldenKeys.list });
      void qc.invalidateQueries({ queryKey: goldenKeys.detail(saved.id) });
    },
  });
  const { reset } = save;

  // biome-ignore lint/correctness/useExhaustiveDependencies: any edit of the form clears the last answer
  useEffect(() => {
    reset();
  }, [batchId, target, name, setId, include]);

  const problem =
    include.length === 0
      ? "Include accepted or corrected answers (or both)."
      : target === "new"
        ? name.trim() === ""
          ? "Name the new set."
          : null
        : chosenSet
          ? null
          : "You have no golden set to add to yet.";
  const canSave = !problem && !save.isPending && !save.isSuccess;
  const batch = batches.find((b) => b.id === batchId);

  return (
    <ModalForm
      title="Save reviewed as golden set"
      width="md"
      onClose={onClose}
      onSubmit={() => {
        if (canSave) save.mutate();
      }}
      data-testid="save-golden-dialog"
    >
        <p className="text-xs text-zinc-600">
          What people decided becomes the answers later runs are graded against: an accepted item keeps the model&apos;s answer, a
          corrected one the person&apos;s, and a rejection without a correction is left out.
        </p>

        {batches.length > 1 ? (
          <LabelledSelect label="Reviewed batch" value={batchId} onChange={(e) => setBatchId(e.target.value)}>
            {batches.map((b) => (
              <option key={b.id} value={b.id}>
                {b.title} ({shortId(b.id)})
              </option>
            ))}
          </LabelledSelect>
        ) : (
          <p className="min-w-0 text-xs text-zinc-600">
            From batch <span className="font-mono text-zinc-800">{shortId(batchId)}</span>
            {batch ? <span className="wrap-anywhere"> · {batch.title}</span> : null}
          </p>
        )}

        <fieldset className="flex flex-col gap-1.5">
          <legend className={`${labelClass} mb-1`}>Save to</legend>
          <label className="flex items-center gap-2">
            <input type="radio" name={ids.set} checked={target === "new"} onChange={() => setTarget("new")} />A new set
          </label>
          <span className="pl-6">
            <input
              id={ids.name}
              aria-label="Name of the new set"
              placeholder="e.g. Support tickets, reviewed"
              value={name}
              maxLength={GOLDEN_SET_NAME_MAX_CHARS}
              disabled={target !== "new"}
              onChange={(e) => setName(e.target.value)}
              className={fieldClass}
            />
          </span>
          <label className="flex items-center gap-2">
            <input
              type="radio"
              name={ids.set}
              checked={target === "existing"}
              disabled={!sets.data?.length}
              onChange={() => setTarget("existing")}
            />
            Add to an existing set (a new version)
          </label>
          <span className="pl-6">
            <select
              aria-label="Golden set to add to"
              value={chosenSet?.id ?? ""}
              disabled={target !== "existing" || !sets.data?.length}
              onChange={(e) => setSetId(e.target.value)}
              className={fieldClass}
            >
              {sets.data?.length ? null : <option value="">{sets.isPending ? "Loading your sets…" : "No golden sets yet"}</option>}
              {sets.data?.map((s) => (
                <option key={s.id} value={s.id}>
                  {s.name} (version {s.version}, {formatCount(s.items)} items)
                </option>
              ))}
            </select>
          </span>
          {sets.isError ? <ErrorText error={sets.error} /> : null}
        </fieldset>

        <fieldset className="flex flex-col gap-1.5">
          <legend className={`${labelClass} mb-1`}>Include</legend>
          {GOLDEN_INCLUDE.map((kind) => (
            <label key={kind} className="flex items-center gap-2">
              <input
                type="checkbox"
                checked={include.includes(kind)}
                onChange={(e) => setInclude((now) => GOLDEN_INCLUDE.filter((k) => (k === kind ? e.target.checked : now.includes(k))))}
              />
              {INCLUDE_LABELS[kind]}
            </label>
          ))}
        </fieldset>

        {problem && !save.isSuccess ? <p className="text-xs text-zinc-600">{problem}</p> : null}
        {save.isError ? <ErrorText error={save.error} /> : null}
        {save.data ? <SavedNote saved={save.data} /> : null}

        <div className="flex justify-end gap-2">
          <button type="submit" disabled={!canSave} aria-busy={save.isPending || undefined} className={buttonClasses("primary", "sm")}>
            {save.isPending ? <Spinner /> : null}
            Save golden set
          </button>
        </div>
    </ModalForm>
  );
}

function SavedNote({ saved }: { saved: Saved }) {
  return (
    <div role="status" data-testid="golden-saved" className="rounded-md bg-emerald-50 px-3 py-2 text-xs text-emerald-900 ring-1 ring-emerald-200 ring-inset">
      <p className="wrap-anywhere">
        Saved <span className="font-medium">{saved.name}</span> version {saved.version}: {formatCount(saved.items)} items (
        {formatCount(saved.added)} added, {formatCount(saved.replaced)} replaced).
      </p>
      <Link href={goldenSetPagePath(saved.id)} className="mt-1 inline-block font-medium text-sky-800 underline underline-offset-2">
        Open the golden set
      </Link>
    </div>
  );
}
