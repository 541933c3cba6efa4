"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useDeferredValue, useEffect, useId, useMemo, useRef, useState } from "react";
import { FilesBatchSource, type FilesSelection } from "@/components/files/batch-source";
import { type BatchProjection, type Features, MAX_PILOT_ITEMS, providerBatchLane } from "@/lib/api/batches";
import { type BatchSubmission, FILE_PLACEHOLDER } from "@/lib/api/files";
import type { VariantRequest } from "@/lib/api/variants";
import { ITEM_PLACEHOLDER, submissionLimits, submissionRefusal } from "@/lib/batch-rules";
import { fetchFeatures, submitBatch, submitVariant } from "../api";
import { budgetBody } from "../budget";
import { askChatToLook, batchKeys } from "../panel-state";
import { errorMessage } from "../shared";
import { ErrorText } from "../ui";
import { buttonClasses } from "@/components/ui/button";
import { LabelledSelect, Options } from "@/components/ui/field";
import { ModalForm } from "@/components/ui/modal-form";
import { Spinner } from "@/components/ui/spinner";
import { detectFormat, draftPrompt, type ItemsFormat, parseItemsInput } from "./items-input";
import { ItemsInput, type ItemsFile, type ItemsSource, ItemsSourceSwitch } from "./items-source";
import {
  chosenSet,
  type ExamplesDraft,
  ExamplesField,
  examplesDraftOf,
  examplesOf,
  type GoldenChoice,
  GoldenSetItems,
  goldenSetRef,
  useGoldenSets,
} from "./golden-source";
import { LimitsSection, type LimitsDraft } from "./limits";
import { type ReviewDraft, ReviewPolicyField, reviewDraftOf, reviewPolicyOf } from "./review-policy";
import { DraftSummary } from "./preview";
import { buildSubmission, newSubmissionKey } from "./submission";
import { parseChecksText, parseOutputSchemaText } from "./typed-input";
import { FieldPlaceholders, TextArea } from "./text-area";
import { type TypedDraft, TypedOutputSection, useTypedCompile } from "./typed-output";
import { type CostDraft, EstimateView, initialCostDraft, pilotValue, refusedByEstimate, RunOptions, type RunExtras, useBatchEstimate } from "./cost";
import {
  ModelField,
  serverFieldError,
  type VariantItemsChoice,
  VariantItems,
  type VariantOf,
  variantChanges,
  variantProblems,
} from "./variant";

const PREVIEW_COUNT = 3;

function optionalInt(value: string): number | undefined {
  return value.trim() === "" ? undefined : Number(value);
}

/** JSON text for a prefilled field ("" for nothing). */
const jsonText = (value: unknown) => (value === null || value === undefined ? "" : JSON.stringify(value));

/**
 * Starts a batch without the chat: source, sub-agent, template, items (pasted, uploaded or files),
 * limits, preview, submit. With `variantOf` it is "Run a variant…": prefilled from the batch's
 * settings, its items the batch's own (variant.tsx), submitted to POST .../variant.
 */
export function NewBatchDialog({
  threadId,
  onClose,
  onCreated,
  variantOf,
}: {
  threadId: string;
  onClose: () => void;
  onCreated: (batch: BatchProjection) => void;
  variantOf?: VariantOf;
}) {
  const draft = variantOf?.draft;
  const qc = useQueryClient();
  const features = useQuery({ queryKey: batchKeys.features, queryFn: ({ signal }) => fetchFeatures(signal) });
  const limits = features.data?.batches;
  const countId = useId();

  const [subagent, setSubagent] = useState<string>(draft?.subagent ?? "");
  const [model, setModel] = useState(draft?.model ?? "");
  const [variantItems, setVariantItems] = useState<VariantItemsChoice>("all");
  const [template, setTemplate] = useState(draft ? (draft.prompt_template ?? "") : ITEM_PLACEHOLDER);
  const [text, setText] = useState("");
  const [file, setFile] = useState<ItemsFile | null>(null);
  const [format, setFormat] = useState<ItemsFormat | "auto">("auto");
  const [limitsDraft, setLimitsDraft] = useState<LimitsDraft>({
    maxLive: "",
    maxRunning: draft ? String(draft.max_running_items) : "",
    maxTokens: "",
    maxCost: "",
  });
  // "From files": a glob over the thread's workspace instead of typed items; "Golden set": a set's items.
  const [itemsSource, setItemsSource] = useState<ItemsSource>("list");
  const fromFiles = itemsSource === "files";
  const fromGolden = itemsSource === "golden";
  const [golden, setGolden] = useState<GoldenChoice>({ setId: "", version: null });
  // Examples: a golden set's answers before each item's prompt (a variant's start as its original's).
  const [examplesDraft, setExamplesDraft] = useState<ExamplesDraft>(() => examplesDraftOf(draft?.examples));
  const [glob, setGlob] = useState("**");
  const [selection, setSelection] = useState<FilesSelection | null>(null);
  // "Output and checks": JSON text, read on every edit.
  const [typed, setTyped] = useState<TypedDraft>(() => ({
    schema: jsonText(draft?.output_schema),
    checks: draft?.checks.length ? jsonText(draft.checks) : "",
  }));
  // Review: which finished items wait for a person (a variant's starts as its original's).
  const [reviewDraft, setReviewDraft] = useState<ReviewDraft>(() => reviewDraftOf(draft?.review));
  // Pilot and lane (a variant's lane starts as its original's).
  const [cost, setCost] = useState<CostDraft>(() => ({ ...initialCostDraft(), ...(variantOf ? { lane: variantOf.batch.lane } : {}) }));
  // One idempotency key per draft: a repeated click or a retry after a lost answer replays, an edit starts afresh.
  const keyRef = useRef<string | null>(null);

  const subagents = features.data?.subagents ?? [];
  const models = features.data?.models ?? [];
  const chosenSubagent = subagent || subagents.find((s) => s.name === "general")?.name || subagents[0]?.name || "";
  const chosenFacts = subagents.find((s) => s.name === chosenSubagent);
  // The items run on the model chosen, else (a new batch) the sub-agent's own, else the deployment's.
  const runModel = model || chosenFacts?.model || "";
  const runProvider = models.find((m) => m.name === runModel)?.provider;
  // The provider's batch lane is offered only where the server takes it: an openai or anthropic model, a sub-agent without tools.
  const laneAllowed = !!chosenFacts && chosenFacts.tool_groups.length === 0 && providerBatchLane(runProvider);
  // Where the catalog has such a model, say what the lane needs when this draft cannot take it.
  const laneHint =
    !laneAllowed && models.some((m) => providerBatchLane(m.provider))
      ? `The providers' batch lane (50% off) needs a sub-agent without tools${subagents.some((s) => s.tool_groups.length === 0) ? ` (${subagents.filter((s) => s.tool_groups.length === 0).map((s) => s.name).join(", ")})` : ""} on an OpenAI or Anthropic model.`
      : null;
  const pilot = pilotValue(cost, MAX_PILOT_ITEMS);
  const extras: RunExtras = {
    ...(pilot.value !== undefined ? { pilot: pilot.value } : {}),
    ...(laneAllowed && cost.lane === "provider_batch" ? { lane: "provider_batch" as const } : {}),
    // A variant's lane is its original's unless given: say "live" when that is what the dialog shows.
    ...(variantOf?.batch.lane === "provider_batch" && !(laneAllowed && cost.lane === "provider_batch") ? { lane: "live" as const } : {}),
  };
  const source = useDeferredValue(file ? file.text : text);
  const effective = format === "auto" ? detectFormat(file?.name ?? null, source) : format;
  const parsed = useMemo(() => parseItemsInput(source, effective), [source, effective]);
  const budget = budgetBody(limitsDraft.maxTokens, limitsDraft.maxCost);
  const maxLiveItems = optionalInt(limitsDraft.maxLive);
  const maxRunningItems = optionalInt(limitsDraft.maxRunning);
  const outputSchema = useMemo(() => parseOutputSchemaText(typed.schema), [typed.schema]);
  const checks = useMemo(() => parseChecksText(typed.checks), [typed.checks]);
  const review = reviewPolicyOf(reviewDraft);
  const reviewError = "error" in review ? review.error : null;
  const reviewBody = "value" in review && review.value ? { review: review.value } : {};
  const goldenSets = useGoldenSets();
  const goldenSet = chosenSet(goldenSets.data, golden.setId);
  const examples = examplesOf(examplesDraft, goldenSets.data);
  const examplesError = "error" in examples ? examples.error : null;
  const examplesBody = "value" in examples && examples.value ? { examples: examples.value } : {};
  // Well-formed JSON is then compiled as the server would (Ajv, RE2), in a chunk loaded on demand.
  const compiled = useTypedCompile(outputSchema.value, checks.value);
  // A variant's own problems, then what the server refused (shown under the field it names).
  const variantProblem = draft ? variantProblems(draft, { template }) : null;
  const submit = useMutation({
    mutationFn: (body: BatchSubmission | VariantRequest) =>
      variantOf ? submitVariant(threadId, variantOf.batch.id, body as VariantRequest) : submitBatch(threadId, body as BatchSubmission),
    onSuccess: (batch) => {
      qc.setQueryData<BatchProjection[]>(batchKeys.list(threadId), (list) => [batch, ...(list ?? []).filter((b) => b.id !== batch.id)]);
      void qc.invalidateQueries({ queryKey: batchKeys.list(threadId) });
      // The server stored the batch's receipt in the thread (and may have titled it): the chat shows it.
      askChatToLook(qc, threadId);
      onCreated(batch);
    },
  });
  const refusal = variantOf ? serverFieldError(submit.error) : null;
  const refusedAt = (field: NonNullable<typeof refusal>["field"]) => (refusal?.field === field ? refusal.message : null);
  const schemaError = outputSchema.error ?? compiled.schemaError ?? refusedAt("schema");
  const checksError = checks.error ?? compiled.checksError ?? refusedAt("checks");
  const templateError = variantProblem?.template ?? refusedAt("template");
  const typedError =
    outputSchema.error ?? compiled.schemaError ?? checks.error ?? compiled.checksError ?? (compiled.pending ? "checking" : null);
  const built = limits
    ? buildSubmission(
        {
          submissionKey: "",
          subagent: chosenSubagent || undefined,
          template,
          items: parsed.items,
          maxLiveItems,
          maxRunningItems,
          fields: parsed.fields,
          outputSchema: outputSchema.value,
          checks: checks.value,
        },
        {
          maxItems: limits.max_items_per_batch,
          maxLiveItems: limits.max_live_items_per_batch,
          maxRunningItems: limits.max_running_items_per_batch,
        },
      )
    : null;
  const problem = variantOf
    ? (variantProblem?.template ?? null)
    : fromFiles
    ? (selection?.problem ?? budget.error ?? null)
    : fromGolden
    ? (budget.error ?? null)
    : (parsed.error ??
      (parsed.items.length > 0
        ? (built?.error ?? (built?.body && limits ? submissionRefusal(built.body, submissionLimits(limits)) : null) ?? budget.error)
        : null) ??
      null);

  const { reset } = submit;

  // biome-ignore lint/correctness/useExhaustiveDependencies: any edit of the draft invalidates its key
  useEffect(() => {
    keyRef.current = null;
    reset();
  }, [chosenSubagent, model, variantItems, template, source, effective, limitsDraft, itemsSource, glob, typed, cost, reviewDraft, golden, examplesDraft]);

  // The submission the draft makes (its key aside), or null while the draft has a problem of its own.
  const complete =
    (variantOf ? true : fromFiles ? !!selection && selection.count > 0 : fromGolden ? !!goldenSet : !!built?.body) &&
    !problem &&
    !typedError &&
    !reviewError &&
    !examplesError;
  const variantBody: VariantRequest | null =
    draft && complete
      ? {
          submission_key: "",
          ...variantChanges(draft, {
            subagent: chosenSubagent,
            model,
            template,
            outputSchema: typed.schema.trim() === "" ? null : outputSchema.value,
            checks: checks.value,
            maxRunningItems,
            items: variantItems,
            review: "value" in review ? review.value : null,
            examples: "value" in examples ? examples.value : null,
          }),
        }
      : null;
  // What a files or golden-set submission says besides where its items come from.
  const sourcedBody = {
    submission_key: "",
    subagent: chosenSubagent || undefined,
    prompt_template: template,
    ...(model ? { model } : {}),
    max_live_items: maxLiveItems,
    max_running_items: maxRunningItems,
    ...(outputSchema.value !== undefined ? { output_schema: outputSchema.value } : {}),
    ...(checks.value?.length ? { checks: checks.value } : {}),
    ...reviewBody,
    ...examplesBody,
    ...budget.body,
  };
  const draftBody: BatchSubmission | null = !complete || variantOf
    ? null
    : fromFiles
      ? { ...sourcedBody, files: glob }
      : fromGolden && goldenSet
        ? { ...sourcedBody, golden_set: goldenSetRef(goldenSet, golden.version) }
        : built?.body
          ? { ...built.body, ...budget.body, ...reviewBody, ...examplesBody, ...(model ? { model } : {}) }
          : null;
  // The estimate is of the whole batch on the chosen lane (a pilot runs the first items of the same).
  // (A variant has no estimate of its own: the dialog says what its original cost.)
  const estimate = useBatchEstimate(
    threadId,
    draftBody ? ({ ...draftBody, submission_key: "estimate", ...(extras.lane ? { lane: extras.lane } : {}) } as BatchSubmission) : null,
  );
  const refused = refusedByEstimate(estimate.error) && !estimate.waiting;

  // A typo in Output schema or Checks shows under its field and holds the batch back, as does a draft the estimate refused.
  const body = variantBody ?? draftBody;
  const canSubmit = body !== null && !pilot.error && !refused && !submit.isPending;
  const onSubmit = () => {
    if (!canSubmit || !body) return;
    keyRef.current ??= newSubmissionKey();
    submit.mutate({ ...body, ...extras, submission_key: keyRef.current } as BatchSubmission | VariantRequest);
  };

  return (
    <ModalForm
      title={variantOf ? "Run a variant" : "New batch"}
      width="lg"
      onClose={onClose}
      onSubmit={onSubmit}
      data-testid="new-batch-dialog"
      data-variant-of={variantOf?.batch.id}
    >
        {variantOf ? (
          <VariantItems variantOf={variantOf} value={variantItems} onChange={setVariantItems} error={refusedAt("items")} />
        ) : (
          <ItemsSourceSwitch
            source={itemsSource}
            onChange={(next) => {
              setItemsSource(next);
              const files = next === "files";
              // Swap the untouched default template for the other mode's placeholder.
              if (template === (files ? ITEM_PLACEHOLDER : FILE_PLACEHOLDER)) setTemplate(files ? FILE_PLACEHOLDER : ITEM_PLACEHOLDER);
            }}
          />
        )}
        <SubagentField subagents={subagents} value={chosenSubagent} onChange={setSubagent} error={refusedAt("subagent")} />
        {draft ? (
          <ModelField models={draft.models} value={model} onChange={setModel} error={refusedAt("model")} />
        ) : (
          <ModelField
            models={models.map((m) => m.name)}
            value={model}
            onChange={setModel}
            error={null}
            defaultLabel={chosenFacts ? `${chosenFacts.model} (the sub-agent's)` : "the sub-agent's"}
          />
        )}
        <TemplateField
          value={template}
          onChange={setTemplate}
          fromFiles={fromFiles}
          error={templateError}
          variantFields={variantOf ? variantOf.batch.input_fields : undefined}
          ownPrompts={draft?.prompt_template === null}
        />

        {fromFiles && !variantOf ? (
          <FilesBatchSource threadId={threadId} glob={glob} template={template} onGlobChange={setGlob} onSelection={setSelection} />
        ) : null}
        {fromGolden && !variantOf ? <GoldenSetItems value={golden} onChange={setGolden} /> : null}
        <ItemsInput
          hidden={fromFiles || fromGolden || !!variantOf}
          text={text}
          onText={setText}
          file={file}
          onFile={setFile}
          format={format}
          effective={effective}
          onFormat={setFormat}
        />
        <TypedOutputSection
          draft={typed}
          onChange={(next) => setTyped((t) => ({ ...t, ...next }))}
          errors={{ schema: schemaError, checks: checksError }}
          expectedColumn={fromGolden || (!fromFiles && parsed.expected)}
          open={!!variantOf && (typed.schema !== "" || typed.checks !== "")}
        />
        <ExamplesField draft={examplesDraft} onChange={setExamplesDraft} error={examplesError ?? refusedAt("examples")} />
        <ReviewPolicyField draft={reviewDraft} onChange={setReviewDraft} error={reviewError ?? refusedAt("review")} />
        <LimitsSection
          limits={limits}
          workers={features.data?.worker_runtime}
          draft={limitsDraft}
          onChange={(next) => setLimitsDraft((d) => ({ ...d, ...next }))}
          runningOnly={!!variantOf}
        />
        {fromFiles || fromGolden || variantOf ? null : (
          <DraftSummary
            countId={countId}
            parsed={parsed}
            prompts={parsed.items.slice(0, PREVIEW_COUNT).map((item) => draftPrompt(item, template))}
            maxItems={limits?.max_items_per_batch}
            problem={problem}
          />
        )}

        <RunOptions
          draft={cost}
          onChange={(next) => setCost((c) => ({ ...c, ...next }))}
          laneAllowed={laneAllowed}
          laneHint={laneHint}
          pilotError={pilot.error ?? refusedAt("pilot")}
          maxPilot={MAX_PILOT_ITEMS}
        />
        {variantOf ? null : (
          <EstimateView estimate={estimate.data} error={estimate.error} waiting={estimate.waiting} blocked={draftBody === null} />
        )}

        {submit.isError && (!variantOf || refusal?.field === "other") ? (
          <p role="alert" className="rounded-md bg-red-50 px-2 py-1.5 text-xs text-red-800 ring-1 ring-red-200 ring-inset">
            {errorMessage(submit.error)}
          </p>
        ) : null}

        <div className="flex justify-end gap-2">
          <button type="submit" disabled={!canSubmit} className={buttonClasses("primary", "sm")}>
            {submit.isPending ? <Spinner /> : null}
            {variantOf ? "Start variant" : "Start batch"}
          </button>
        </div>
    </ModalForm>
  );
}

function SubagentField({
  subagents,
  value,
  onChange,
  error,
}: {
  subagents: Features["subagents"];
  value: string;
  onChange: (name: string) => void;
  error?: string | null;
}) {
  return (
    <LabelledSelect
      label="Sub-agent"
      value={value}
      onChange={(e) => onChange(e.target.value)}
      after={
        <>
          <p className="text-xs text-zinc-600">{subagents.find((s) => s.name === value)?.description}</p>
          {error ? <ErrorText error={error} /> : null}
        </>
      }
    >
      <Options options={subagents.map((s) => ({ value: s.name, label: s.name }))} />
    </LabelledSelect>
  );
}

function TemplateField({
  value,
  onChange,
  fromFiles,
  error,
  variantFields,
  ownPrompts,
}: {
  value: string;
  onChange: (v: string) => void;
  fromFiles: boolean;
  error?: string | null;
  /** A variant's items' field names ([] for plain items); undefined for a new batch. */
  variantFields?: string[];
  /** A variant of items given as prompts, which no template fills. */
  ownPrompts?: boolean;
}) {
  return (
    <TextArea
      label="Prompt template"
      // The dialog opens to write the template.
      autoFocus
      value={value}
      onChange={(e) => onChange(e.target.value)}
      error={error}
      hint={
        variantFields !== undefined ? (
          ownPrompts ? (
            "The items were given as prompts of their own: they run as written."
          ) : variantFields.length > 0 ? (
            <>
              The items&apos; fields:{" "}
              <FieldPlaceholders fields={variantFields} />
              .
            </>
          ) : (
            <>
              <code className="font-mono">{ITEM_PLACEHOLDER}</code> is replaced by each item.
            </>
          )
        ) : (
        <>
          <code className="font-mono">{fromFiles ? FILE_PLACEHOLDER : ITEM_PLACEHOLDER}</code> is replaced by each{" "}
          {fromFiles ? "file's path." : "item."}
          <span hidden={fromFiles}>
            {" "}
            Items with their own <code className="font-mono">prompt</code> (JSONL or a CSV prompt column) are used as written;
            a CSV's other columns are fields: <code className="font-mono">{"{{column}}"}</code> is replaced by its value.
          </span>
        </>
        )
      }
    />
  );
}
