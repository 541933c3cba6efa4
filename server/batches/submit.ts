import { randomUUID } from "node:crypto";
import { and, eq } from "drizzle-orm";
import { providerBatchLane, type ReviewPolicy, submitBatchSchema } from "@/lib/api/batches";
import { type BatchSubmission, isFileSubmission, isGoldenSubmission, submitFileBatchSchema, submitGoldenBatchSchema } from "@/lib/api/files";
import { type Check, GOLDEN_CHECK_NAME, type OutputSchema, type SpecCheck } from "@/lib/api/batch-data";
import {
  budgetProblem,
  checksProblem,
  FILE_PLACEHOLDER,
  filesProblem,
  fieldTemplate,
  fillFields,
  filledLength,
  fillTemplate,
  ITEM_PLACEHOLDER,
  inputFields,
  isFieldsItem,
  issueProblem,
  isProblem,
  itemKey,
  itemsProblem,
  jsonLocator,
  type Locator,
  type ParsedItem,
  type Problem,
  parseItems,
  problemText,
  submissionLimits,
  templateProblem,
  templateShape,
  windowProblem,
} from "@/lib/batch-rules";
import { checkPatternProblem, newPatternBudget } from "@/lib/check-pattern";
import type { FlotillaConfig } from "@/lib/config";
import { type DbOrTx, driverOf } from "@/server/db/client";
import { subagentBatches, threads } from "@/server/db/schema";
import { AppError, notFound } from "@/server/errors";
import { findCatalogEntry } from "@/server/models/catalog";
import { resolveModel } from "@/server/models/index";
import { compileOutputSchemaYielding, prepareOutputSchema, validateAnswer } from "@/server/runtime/output-schema";
import { nextTurn } from "@/server/runtime/next-turn";
import { matchingPaths } from "@/server/workspace/files";
import { assertDailyTokenQuota, modelPrices } from "./budget";
import { type GoldenRunItems, goldenRunItems } from "./golden-sets";
import { type ItemRow, insertItemRows, insertItems, oneInsert } from "./insert-items";
import { BATCH_CHANNEL, batchEventPayload } from "./notify";
import { buildExecutionSpec, type ExecutionSpec, type SpecDefinition, type SubmissionOrigin } from "./spec";
import type { BatchRow } from "./types";
import { resolveExamples } from "./examples";

/**
 * The one writer of batches. Every door (JSON, NDJSON and CSV bodies, the files glob, batch_task,
 * the New batch dialog, the compatible /v1 APIs) parses only its envelope and hands the result
 * here, so every batch gets the same rules (lib/batch-rules.ts), bounds computed before
 * anything is expanded, per-user quotas, the daily token quota, a price snapshot from the model
 * catalog and its budgets, written in one transaction.
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A refusal as the door names it: 413 for a bound on size, 400 otherwise. */
export function refusal(problem: Problem, locator: Locator = jsonLocator): AppError {
  return new AppError(problem.tooLarge ? "payload_too_large" : "validation_failed", problemText(problem, locator));
}

/** Items of a batch over files are named by their path. */
function fileLocator(paths: readonly string[]): Locator {
  const at = (i: number) => `file ${JSON.stringify(paths[i] ?? "")}`;
  return { item: at, field: (i, f) => `${at(i)}: ${f}` };
}

/** Items of a run against a golden set are named by their item_key in the set. */
function goldenLocator(keys: readonly string[]): Locator {
  const at = (i: number) => `golden_set item ${JSON.stringify(keys[i] ?? "")}`;
  return { item: at, field: (i, f) => `${at(i)}: ${f}` };
}

/**
 * The paths a files batch would run over, refused (before another path is read) as soon as
 * their count or the prompts' computed total passes its bound: the glob's matches, never the
 * thread's size, set what is held.
 */
async function boundedMatches(
  db: DbOrTx,
  args: { userId: string; threadId: string; glob: string; template: string; limits: ReturnType<typeof submissionLimits> },
): Promise<string[]> {
  const { limits } = args;
  const shape = templateShape(args.template, FILE_PLACEHOLDER);
  const paths: string[] = [];
  let total = 0;
  for await (const path of matchingPaths(db, { userId: args.userId, threadId: args.threadId, glob: args.glob })) {
    paths.push(path);
    total += filledLength(shape, path.length);
    if (paths.length > limits.maxItems)
      throw refusal({ field: "files", message: `the glob matches more than ${limits.maxItems} files; at most ${limits.maxItems} items per batch` });
    if (total > limits.maxTotalPromptChars)
      throw refusal({
        field: "files",
        tooLarge: true,
        message: `the expanded prompts would total more than ${limits.maxTotalPromptChars} characters per batch (subagent_batches.max_total_prompt_chars)`,
      });
  }
  return paths;
}

export interface SubmitBatchArgs {
  userId: string;
  threadId: string;
  /** The normalized submission: items, or a glob over the thread's workspace files (adds the `workspace` group). */
  input: BatchSubmission;
  /** How the door names an item in its refusals (default: the JSON path, `items.3`). */
  locator?: Locator;
  config: FlotillaConfig;
  /**
   * The sub-agent the submission names (`input.subagent`, default general), resolved by the door
   * (server/agent/registry.ts batchSubagent), and the allowlist it was checked against.
   */
  definition: SpecDefinition;
  allowedSubagents: string[];
  /** Model recorded in the execution spec; default: this process's resolved model. */
  model?: { name: string; simulator: boolean; catalogName?: string };
  /** Where the submission came from; the tool passes its run and tool call. Default api. */
  origin?: SubmissionOrigin;
  /** A variant: the batch it re-runs, and its items' keys by position (string items carry none of their own). */
  variant?: { of: string; itemKeys: readonly string[] };
}

/** Top-level fields (everything but items) against the wire schema: a caller that skipped its door is still checked. */
export function envelopeProblem(input: BatchSubmission): Problem | null {
  if (isGoldenSubmission(input)) {
    if ("items" in input) return { field: "golden_set", message: "give either golden_set or items, not both" };
    const parsed = submitGoldenBatchSchema.safeParse(input);
    return parsed.success ? null : issueProblem(parsed.error.issues);
  }
  const schema = isFileSubmission(input) ? submitFileBatchSchema : submitBatchSchema.omit({ items: true });
  const { items: _items, ...rest } = input as { items?: unknown };
  const parsed = schema.safeParse(isFileSubmission(input) ? input : rest);
  return parsed.success ? null : issueProblem(parsed.error.issues);
}

/** Each item's shape (a door has already checked it; a direct caller may not have). */
function checkedItems(raw: unknown): ParsedItem[] | Problem {
  if (!Array.isArray(raw)) return { field: "items", message: "expected an array of items" };
  return parseItems(raw);
}

/**
 * What the data rules need beyond the shared ones: the output schema compiles (the
 * submission's, else the definition's), every regex compiles under RE2 within the pattern
 * budget (lib/check-pattern.ts; the checks' patterns together too), a judge's model is in
 * the catalog. Throws the refusal.
 */
async function checkDataRules(args: {
  outputSchema: OutputSchema | undefined;
  checks: readonly Check[];
  expected: boolean;
  config: FlotillaConfig;
}): Promise<void> {
  // Compiling patterns is bounded CPU work; the event loop runs between patterns.
  if (args.outputSchema) await compileOutputSchemaYielding(args.outputSchema);
  const problem = checksProblem(args.checks, { outputSchema: args.outputSchema !== undefined, expected: args.expected });
  if (problem) throw refusal(problem);
  const patterns = newPatternBudget();
  for (const [i, check] of args.checks.entries()) {
    if (check.type === "regex") {
      await nextTurn();
      const issue = checkPatternProblem(check.pattern, check.flags, patterns);
      if (issue) throw refusal({ field: `checks.${i}.pattern`, message: issue });
    }
    if (check.type === "judge" && check.model !== undefined && !findCatalogEntry(args.config, check.model))
      throw refusal({ field: `checks.${i}.model`, message: `unknown model "${check.model}" (not in the model catalog)` });
  }
}

/**
 * The items as written: key, prompt (built only now that every bound held; the template is
 * read once for the whole batch), what the owner sees as input, the expected value. Also
 * rebuilds the row of an item retried with a corrected input.
 */
export function itemRows(items: readonly ParsedItem[], template: string | undefined, keys?: readonly string[]): ItemRow[] {
  const valueParts = template?.split(ITEM_PLACEHOLDER);
  const fieldShape = template === undefined ? null : fieldTemplate(template);
  return items.map((item, index) => {
    const key = keys?.[index] ?? itemKey(item, index);
    if (typeof item === "string") return { key, prompt: valueParts ? valueParts.join(item) : item, input: item };
    if (!isFieldsItem(item)) return { key, prompt: item.prompt, input: item.prompt };
    const row: ItemRow = { key, prompt: fillFields(fieldShape, item.fields), input: item.input };
    if (item.expected !== undefined) row.expected = item.expected;
    return row;
  });
}

/** A submission that passed every rule of the writer: its items as they would be written, and its spec. */
export interface PreparedSubmission {
  rows: ItemRow[];
  spec: ExecutionSpec;
}

/**
 * Creates a batch and its items, or answers with the batch an earlier submission with the same
 * (user, submission_key) made (`created: false`; never refused by a quota). Everything is
 * checked before anything is written; on any refusal nothing is.
 */
export async function submitBatch(db: DbOrTx, args: SubmitBatchArgs): Promise<{ batch: BatchRow; created: boolean }> {
  const prepared = await prepareSubmission(db, args, { replay: true });
  if ("replay" in prepared) return { batch: prepared.replay, created: false };
  const { input, config } = args;
  const { rows, spec } = prepared;
  const b = config.subagent_batches;
  const write = await db.transaction((tx) =>
    writeBatch(tx, {
      userId: args.userId,
      threadId: args.threadId,
      submissionKey: input.submission_key,
      spec,
      config,
      total: rows.length,
      maxLiveItems: input.max_live_items ?? b.default_max_live_items,
      maxRunningItems: input.max_running_items ?? b.default_max_running_items,
      maxTotalTokens: input.max_total_tokens ?? null,
      maxCostUsd: input.max_cost_usd ?? null,
      pilot: input.pilot ?? null,
      // Only the lead's own submissions wake it when they settle (API and dialog batches never do).
      wakeLead: spec.caller.origin === "tool" && b.wake_lead,
      variantOf: args.variant?.of ?? null,
      review: input.review ?? null,
      // One COPY for the whole batch (insert-items.ts streams it in bounded messages).
      chunks: [rows],
    }),
  );
  // The commit went out behind the last writes; a refused one made it a rollback and rejects here.
  return { batch: await write.written, created: write.created };
}

/**
 * Every rule of the writer, in its order, writing nothing: the submission's items as rows and
 * its execution spec (server/batches/estimate.ts prices the same). The thread must be the
 * caller's (404). `replay`: a files submission whose key made a batch already answers with it.
 */
export async function prepareSubmission(
  db: DbOrTx,
  args: SubmitBatchArgs,
  options: { replay: boolean },
): Promise<PreparedSubmission | { replay: BatchRow }> {
  if (!UUID.test(args.threadId)) throw notFound("thread");
  const { input, config } = args;
  const limits = submissionLimits(config.subagent_batches);
  const locator = args.locator ?? jsonLocator;
  const first = envelopeProblem(input) ?? windowProblem(input, limits) ?? budgetProblem(input);
  if (first) throw refusal(first, locator);
  if ((input.subagent ?? "general") !== args.definition.name)
    throw new Error(`submitBatch: the door resolved ${args.definition.name}, the submission names ${input.subagent}`);

  const outputSchema = input.output_schema ?? args.definition.outputSchema;
  const checks: SpecCheck[] = [...(input.checks ?? [])];
  let golden: GoldenRunItems | undefined;
  let rows: ItemRow[];
  let fields: string[] = [];
  const overFiles = isFileSubmission(input);
  if (isFileSubmission(input)) {
    // A replay answers with the batch it made, whatever the workspace holds by now.
    const earlier = await replayOf(db, { ...args, submissionKey: input.submission_key });
    if (earlier && options.replay) return { replay: earlier };
    const template = input.prompt_template;
    const templateIssue = templateProblem(template, FILE_PLACEHOLDER);
    if (templateIssue) throw refusal(templateIssue);
    await checkDataRules({ outputSchema, checks: input.checks ?? [], expected: false, config });
    const paths = await boundedMatches(db, { userId: args.userId, threadId: args.threadId, glob: input.files, template, limits });
    if (paths.length === 0)
      throw new AppError(
        "validation_failed",
        `files: the glob ${JSON.stringify(input.files)} matches no file in this thread's workspace`,
      );
    const problem = filesProblem(paths, template, limits);
    if (problem) throw refusal(problem, fileLocator(paths));
    rows = paths.map((path) => ({ key: path, prompt: fillTemplate(template, FILE_PLACEHOLDER, path), input: path }));
  } else {
    if (!options.replay) await ownedThread(db, args);
    let raw: unknown;
    if (isGoldenSubmission(input)) {
      // The set's items, each with its expected answer; graded by the check "golden".
      golden = await goldenRunItems(db, { userId: args.userId, ref: input.golden_set, maxItems: limits.maxItems });
      raw = golden.items.map((g) => (g.fields ? { item_key: g.item_key, ...g.fields, expected: g.expected } : g.input));
    } else raw = input.items;
    const items = checkedItems(raw);
    const keys = golden?.items.map((g) => g.item_key) ?? args.variant?.itemKeys;
    const itemsLocator = golden ? goldenLocator(keys!) : locator;
    if (isProblem(items)) throw refusal(items, itemsLocator);
    const template = input.prompt_template;
    const problem = itemsProblem(items, template, limits);
    if (problem) throw refusal(problem, itemsLocator);
    const expected = golden !== undefined || items.some((item) => isFieldsItem(item) && item.expected !== undefined);
    await checkDataRules({ outputSchema, checks: input.checks ?? [], expected, config });
    if (golden) {
      const taken = checks.findIndex((c) => c.name === GOLDEN_CHECK_NAME);
      if (taken >= 0) throw refusal({ field: `checks.${taken}.name`, message: `"${GOLDEN_CHECK_NAME}" is the golden set's own check; name this one differently` });
      if (outputSchema) await expectedProblem(outputSchema, golden);
      checks.push({ name: GOLDEN_CHECK_NAME, type: "golden" });
    }
    // Only now, with every length known to be within bounds, are prompts built.
    rows = itemRows(items, template, keys);
    if (golden) for (const [i, g] of golden.items.entries()) rows[i]!.expected = g.expected;
    fields = inputFields(items);
  }

  // Resolved once, here: the batch keeps these examples whatever the set holds later.
  const examples = input.examples ? await resolveExamples(db, { userId: args.userId, request: input.examples }) : null;

  const spec = buildExecutionSpec({
    extraToolGroups: overFiles ? ["workspace"] : [],
    userId: args.userId,
    threadId: args.threadId,
    definition: args.definition,
    allowedSubagents: args.allowedSubagents,
    model: args.model ?? resolveModel(config),
    origin: args.origin ?? { kind: "api" },
    outputSchema: input.output_schema ?? null,
    checks,
    goldenSet: golden?.run ?? null,
    inputFields: fields,
    // Kept for an item retried with a corrected input (repository.ts retryItem).
    promptTemplate: overFiles ? null : input.prompt_template,
    lane: input.lane,
    examples,
  });
  const lane = laneProblem(config, spec);
  if (lane) throw refusal(lane);
  return { rows, spec };
}

/**
 * A golden run's answers against the batch's output schema (the validator the worker checks
 * answers with): 400 naming `golden_set` and the first item whose expected does not validate.
 */
async function expectedProblem(outputSchema: OutputSchema, golden: GoldenRunItems): Promise<void> {
  const schema = prepareOutputSchema(outputSchema);
  for (const item of golden.items) {
    const checked = await validateAnswer(schema, JSON.stringify(item.expected), item.expected);
    if (!checked.ok)
      throw refusal({
        field: "golden_set",
        message: `item "${item.item_key}": its expected answer does not match the batch's output_schema (${checked.errors})`,
      });
  }
}

/** What every door's batch becomes: the row's fields and its items in position order. */
export interface BatchPlan<R extends ItemRow = ItemRow> {
  userId: string;
  threadId: string;
  submissionKey: string;
  spec: ExecutionSpec;
  config: FlotillaConfig;
  /** What the panel shows as the batch's sub-agent (default: the spec's). */
  label?: string;
  total: number;
  maxLiveItems: number;
  maxRunningItems: number;
  maxTotalTokens: number | null;
  maxCostUsd: number | null;
  /** `pilot: N`: only the first N items run, then the batch pauses (pause_reason "pilot"); none when N covers every item. */
  pilot?: number | null;
  wakeLead: boolean;
  /** The batch this one is a variant of. */
  variantOf?: string | null;
  /** Which finished items join the review queue. */
  review?: ReviewPolicy | null;
  /** The items, in position order, a chunk at a time (a compatible batch streams them from its file). */
  chunks: Iterable<R[]> | AsyncIterable<R[]>;
  /** Runs after each chunk is written (its items hold positions offset+1, offset+2, ...). */
  afterChunk?: (tx: DbOrTx, written: { batchId: string; offset: number; items: R[] }) => Promise<void>;
}

/**
 * A batch's writes as sent: `written` settles once the last of them answered. It resolves with
 * every statement handed to the transaction's connection, so a caller that returns it unawaited
 * from its transaction sends the commit right behind the writes (one round trip fewer before a
 * one-item batch can start, issue 44) and awaits `written` after the commit: a refused write
 * aborted the transaction, whose commit then rolled it back, and `written` rejects with the
 * refusal. Await `written` inside the transaction before any statement that must follow the batch.
 */
export interface BatchWrite {
  created: boolean;
  written: Promise<BatchRow>;
}

/**
 * Writes one batch inside the caller's transaction: per-user quotas and the daily token quota
 * under the per-user lock (admitWork), the price snapshot, the batch row, its items, the submit
 * notification. A replay of a known key returns that batch unrefused.
 */
export async function writeBatch<R extends ItemRow>(tx: DbOrTx, plan: BatchPlan<R>): Promise<BatchWrite> {
  // The lock, the replay's reads and the quotas' go out together (postgres.js pipelines them on the
  // transaction's connection): PostgreSQL runs them in order, each read with its own snapshot taken
  // after the lock is held, so the answers are those of one at a time, at one round trip instead of
  // five (a one-item batch's created_at -> started_at is mostly this transaction, issue 44). A replay
  // answers before any quota refusal counts. Every statement of this transaction is a prepared one
  // (postgres.js tagged templates, drizzle's .prepare()): an unnamed statement with parameters is
  // described before it is bound, and postgres.js holds the pipeline until that answers.
  const [locked, replay, admitted] = await Promise.allSettled([
    lockUserWork(tx, plan.userId),
    replayOf(tx, plan),
    admitWork(tx, { userId: plan.userId, config: plan.config, items: plan.total }),
  ]);
  if (locked.status === "rejected") throw locked.reason;
  if (replay.status === "rejected") throw replay.reason;
  if (replay.value) return { written: Promise.resolve(replay.value), created: false };
  if (admitted.status === "rejected") throw admitted.reason;

  const spec: ExecutionSpec = {
    ...plan.spec,
    prices: priceSnapshot(plan.config, plan.spec),
    ...(plan.spec.lane === "provider_batch" ? batchLane(plan.config, plan.spec.model.name) : {}),
  };
  const prices = spec.prices[spec.model.name]!;
  const live = Math.min(plan.total, plan.maxLiveItems);
  // The id is chosen here so the submit notification (delivered at commit; a rolled-back
  // transaction sends nothing) goes out with the batch's insert instead of a round trip after it.
  const id = randomUUID();
  const inserted = Promise.all([
    tx
    .insert(subagentBatches)
    .values({
      id,
      userId: plan.userId,
      threadId: plan.threadId,
      submissionKey: plan.submissionKey,
      subagent: plan.label ?? plan.spec.subagent.name,
      lane: spec.lane,
      executionSpec: spec,
      total: plan.total,
      maxLiveItems: plan.maxLiveItems,
      maxRunningItems: plan.maxRunningItems,
      maxAttempts: plan.config.subagent_batches.max_attempts,
      pendingCount: plan.total - live,
      queuedCount: live,
      maxTotalTokens: plan.maxTotalTokens,
      maxCostUsd: plan.maxCostUsd,
      pilot: plan.pilot != null && plan.pilot < plan.total ? plan.pilot : null,
      priceInputPerMillion: prices.input,
      priceOutputPerMillion: prices.output,
      dailyTokenQuota: plan.config.quotas.max_tokens_per_day,
      wakeLead: plan.wakeLead,
      variantOf: plan.variantOf ?? null,
      reviewWhen: plan.review?.when ?? null,
      reviewRate: plan.review?.rate ?? null,
    })
    .returning()
    .prepare("insert_batch")
    .execute(),
    driverOf(tx)`select pg_notify(${BATCH_CHANNEL}::text, ${batchEventPayload("submit", id)}::text)`,
  ]);
  inserted.catch(() => {}); // awaited below, after the first chunk that may go out behind it
  // A small first chunk goes out right behind the batch's insert (PostgreSQL runs them in order,
  // so the foreign key holds): the batch, its items and the notification in one round trip, left
  // in flight when nothing follows them (BatchWrite). A refused batch insert aborts the
  // transaction, and the first error is its.
  let inFlight: Promise<unknown> | undefined;
  let offset = 0;
  let first = true;
  for await (const items of plan.chunks) {
    if (first && oneInsert(items)) {
      // The rows are checked (NUL refused) before anything of theirs is sent.
      inFlight = Promise.all([inserted, insertItemRows(tx, { batchId: id, offset, live, items })]);
      inFlight.catch(() => {}); // observed through `written`
      if (plan.afterChunk) await inFlight;
    } else {
      await (inFlight ?? inserted);
      await insertItems(tx, { batchId: id, offset, live, items });
    }
    first = false;
    await plan.afterChunk?.(tx, { batchId: id, offset, items });
    offset += items.length;
  }
  if (offset !== plan.total) throw new AppError("conflict", "the input changed while the batch was being written; retry");
  const written = Promise.all([inserted, inFlight]).then(([[[batch]]]) => batch!);
  written.catch(() => {}); // the caller awaits it, possibly only after the commit
  return { written, created: true };
}

/**
 * The price snapshot: the catalog's prices now of the batch's model (also the batch row's price
 * columns) and of each judge's model, by catalog name (the worker prices each model's tokens at its own).
 */
function priceSnapshot(config: FlotillaConfig, spec: ExecutionSpec): ExecutionSpec["prices"] {
  const judges = spec.checks.flatMap((c) => (c.type === "judge" && c.model ? [c.model] : []));
  return Object.fromEntries([spec.model.name, ...judges].map((name) => [name, modelPrices(config, name)]));
}

/**
 * `lane: "provider_batch"` needs a model whose provider has a batch API (an openai or anthropic
 * entry) and a sub-agent without tool groups: one model call an item, nothing to run between.
 */
function laneProblem(config: FlotillaConfig, spec: ExecutionSpec): Problem | null {
  if (spec.lane !== "provider_batch") return null;
  const entry = findCatalogEntry(config, spec.model.name);
  if (!providerBatchLane(entry?.provider))
    return {
      field: "lane",
      message: `provider_batch needs an openai or anthropic model; the batch's model "${spec.model.name}" is ${entry ? `an ${entry.simulator ? "simulator" : (entry.provider ?? "openai-compatible")} entry` : "not in the catalog"}`,
    };
  if (spec.tool_groups.length > 0)
    return {
      field: "lane",
      message: `provider_batch sends one model call an item; the sub-agent "${spec.subagent.name}" has tool groups (${spec.tool_groups.join(", ")})`,
    };
  return null;
}

/** The provider batch lane of this model: its provider and the share of the price a provider batch costs (0.5 by default). */
function batchLane(config: FlotillaConfig, model: string): Pick<ExecutionSpec, "batch_discount" | "batch_provider"> {
  const entry = findCatalogEntry(config, model);
  return { batch_discount: entry?.batchDiscount ?? 0.5, batch_provider: entry?.provider === "openai" ? "openai" : "anthropic" };
}

/**
 * The per-user lock every way of giving a user's batches work takes first (a submission, a
 * retry), held to the end of the transaction: two of them cannot both take the last slot.
 */
export async function lockUserWork(tx: DbOrTx, userId: string): Promise<void> {
  await driverOf(tx)`select pg_advisory_xact_lock(hashtext('flotilla:submit'), hashtext(${userId}::text))`;
}

/**
 * What `items` more unfinished items must pass, under lockUserWork (429 quota_exceeded):
 * quotas.max_active_batches when they make a batch active (a new one, or a finished one a retry
 * reopens), quotas.max_queued_items, and the daily token quota. From the batch counters (no item
 * scan). `into`: the batch a retry re-queues items of, as locked before anything moved; it is
 * counted from that row, since the retry may already have moved the table's.
 */
export async function admitWork(
  tx: DbOrTx,
  args: { userId: string; config: FlotillaConfig; items: number; into?: BatchRow },
): Promise<void> {
  const { into } = args;
  const quotas = args.config.quotas;
  // The daily quota's read goes out with the counts (pipelined); its refusal comes after theirs.
  const [[usage], daily] = await Promise.all([
    driverOf(tx)<{ active: number; unfinished: number }[]>`
    select count(*)::int as active,
           coalesce(sum(pending_count + queued_count + leased_count + running_count), 0)::int as unfinished
      from subagent_batches
     where user_id = ${args.userId}::uuid and status in ('queued', 'running', 'paused')
       and id is distinct from ${into?.id ?? null}::uuid`,
    assertDailyTokenQuota(tx, args.config, args.userId).then(
      () => null,
      (err: unknown) => err,
    ),
  ]);
  const active = usage?.active ?? 0;
  let unfinished = usage?.unfinished ?? 0;
  if (into) unfinished += into.pendingCount + into.queuedCount + into.leasedCount + into.runningCount;
  const opens = !into || into.status === "completed" || into.status === "failed";
  if (opens && active >= quotas.max_active_batches)
    throw new AppError(
      "quota_exceeded",
      `quotas.max_active_batches: you have ${active} active batches, the most allowed; wait for one to finish or cancel one`,
    );
  if (unfinished + args.items > quotas.max_queued_items)
    throw new AppError(
      "quota_exceeded",
      `quotas.max_queued_items: ${unfinished} of your items are unfinished and this ${into ? "retry" : "batch"} adds ${args.items}; at most ${quotas.max_queued_items} at once`,
    );
  if (daily) throw daily;
}

/** 404 unless the thread is the caller's. */
async function ownedThread(db: DbOrTx, args: { userId: string; threadId: string }): Promise<void> {
  const owned = await db
    .select({ id: threads.id })
    .from(threads)
    .where(and(eq(threads.id, args.threadId), eq(threads.userId, args.userId)))
    .prepare("owned_thread")
    .execute();
  if (owned.length === 0) throw notFound("thread");
}

/** The batch an earlier submission with this key made (404 / 409 when it cannot be this caller's replay), or null. */
async function replayOf(
  db: DbOrTx,
  args: { userId: string; threadId: string; submissionKey: string },
): Promise<BatchRow | null> {
  // Both reads at once (pipelined); the thread's refusal comes first.
  const [, [existing]] = await Promise.all([
    ownedThread(db, args),
    db
      .select()
      .from(subagentBatches)
      .where(and(eq(subagentBatches.userId, args.userId), eq(subagentBatches.submissionKey, args.submissionKey)))
      .prepare("replay_of")
      .execute(),
  ]);
  if (!existing) return null;
  if (existing.threadId !== args.threadId)
    throw new AppError("conflict", "submission_key: already used for a batch in another thread");
  return existing;
}

