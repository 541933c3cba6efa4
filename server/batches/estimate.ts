import type { SpecCheck } from "@/lib/api/batch-data";
import type { BatchEstimate } from "@/lib/api/batches";
import type { FlotillaConfig, ModelProvider } from "@/lib/config";
import type { DbOrTx } from "@/server/db/client";
import { type CatalogEntry, catalogEntries } from "@/server/models/catalog";
import { tokenCounter } from "@/server/models/token-count";
import { turnEvery } from "@/server/runtime/next-turn";
import { ASSUMED_OUTPUT_TOKENS } from "@/server/runtime/rate-limit";
import { type OutputAssumption, outputAssumption } from "./answer-length";
import { JUDGE_SYSTEM, judgePrompt } from "./checks";
import { sharedExamplesText, withExamples } from "./examples";
import type { ItemRow } from "./insert-items";
import type { ExamplesSnapshot } from "./spec";
import { prepareSubmission, type SubmitBatchArgs } from "./submit";

/**
 * What a batch would cost before it runs (DESIGN "What a batch costs", "Estimate before
 * running"): the submission passes every rule of the writer (prepareSubmission: the same 400s,
 * nothing written), then its prompts are counted. The template's text before its first
 * placeholder (with the sub-agent's system prompt, which comes before it) is the shared prefix:
 * counted once, and read from the provider's cache by every item after the first where the
 * provider caches a prefix that long. A batch's examples (examples.ts) open that prefix: counted
 * once with it, except for the items that are examples themselves, whose prompts carry others and
 * are counted whole. A judge check adds one call an item on its own model, at
 * that model's price, live on either lane.
 */

/** Output tokens a judge call is assumed to write: its verdict as JSON, a score and a short reason. */
export const JUDGE_OUTPUT_TOKENS = 100;

type Provider = ModelProvider | "simulator";

/** What the estimate reads of a catalog entry: its provider, its model id and its prices (US dollars per million tokens). */
export interface EstimatePricing {
  provider: Provider;
  model: string;
  input: number;
  output: number;
  cachedInput: number;
  cacheWrite: number;
  /** The share of the price a provider batch costs; null when the entry has no batch lane. */
  batchDiscount: number | null;
}

export function estimatePricing(entry: CatalogEntry): EstimatePricing {
  return {
    provider: entry.simulator ? "simulator" : (entry.provider ?? "openai-compatible"),
    model: entry.model,
    input: entry.pricePerMillionInput,
    output: entry.pricePerMillionOutput,
    cachedInput: entry.pricePerMillionCachedInput,
    cacheWrite: entry.pricePerMillionCacheWrite,
    // The catalog leaves it unset where the provider has no batch lane.
    batchDiscount: entry.batchDiscount ?? null,
  };
}

/** The least prefix a provider caches, in tokens (null: it does not cache): Anthropic's Haiku models 2,048, its others and OpenAI 1,024. */
function cacheMinimum(p: EstimatePricing): number | null {
  if (p.provider === "anthropic") return /haiku/i.test(p.model) ? 2_048 : 1_024;
  if (p.provider === "openai") return 1_024;
  return null;
}

/** The template's text before its first `{{placeholder}}` (all of it when it has none). */
export function sharedPrefix(template: string | undefined): string {
  if (!template) return "";
  const at = template.search(/\{\{[^{}]*\}\}/);
  return at < 0 ? template : template.slice(0, at);
}

const usd = (n: number) => Math.round(n * 1e6) / 1e6;

/** Counts and prices prepared rows (pure apart from loading an encoding once: server/models/token-count.ts). */
export async function estimateRows(args: {
  rows: readonly ItemRow[];
  systemPrompt: string;
  template: string | undefined;
  pricing: EstimatePricing;
  /** What an item is assumed to write (answer-length.ts); the flat default without one. */
  outputPerItem?: OutputAssumption;
  /** The examples every prompt opens with (examples.ts): in the shared prefix, but for the items that are examples themselves. */
  examples?: ExamplesSnapshot | null;
}): Promise<BatchEstimate> {
  const { rows, pricing } = args;
  const { count, method } = await tokenCounter(pricing);
  const prefix = sharedPrefix(args.template);
  const spec = { examples: args.examples ?? null };
  const shared = sharedExamplesText(spec);
  // The items that are examples themselves see another set of examples: their own prompt, uncached.
  const ownExamples = new Set(args.examples?.items.slice(0, args.examples.count).map((e) => e.item_key));
  const systemTokens = await count(args.systemPrompt);
  const sharedTokens = await count(shared);
  const prefixTokens = await count(shared + prefix);
  const breathe = turnEvery(20);
  let input = 0;
  let sharing = 0;
  for (const row of rows) {
    // The prefix is the same text in every prompt that starts with it: counted once, the rest per item.
    if (ownExamples.has(row.key)) input += systemTokens + (await count(withExamples(spec, row.key, row.prompt)));
    else if (shared + prefix !== "" && row.prompt.startsWith(prefix)) {
      sharing++;
      input += systemTokens + prefixTokens + (await count(row.prompt.slice(prefix.length)));
    } else input += systemTokens + sharedTokens + (await count(row.prompt));
    await breathe();
  }
  const cacheable = systemTokens + (sharing > 0 ? prefixTokens : 0);
  const minimum = cacheMinimum(pricing);
  const readers = sharing > 0 ? sharing : rows.length;
  const caches = minimum !== null && cacheable >= minimum && readers > 1;
  const cached = caches ? (readers - 1) * cacheable : 0;
  // Anthropic bills the first item's write of the cached prefix at its cache-write price.
  const written = caches && pricing.provider === "anthropic" ? cacheable : 0;
  const perItem = args.outputPerItem ?? { tokens: ASSUMED_OUTPUT_TOKENS, from: "default" };
  const output = rows.length * perItem.tokens;
  const live =
    ((input - cached - written) * pricing.input + cached * pricing.cachedInput + written * pricing.cacheWrite + output * pricing.output) /
    1_000_000;
  return {
    items: rows.length,
    input_tokens: input,
    cached_input_tokens: cached,
    output_tokens: output,
    tokens_method: method,
    output_per_item: perItem,
    cost_usd: { live: usd(live), ...(pricing.batchDiscount !== null ? { provider_batch: usd(live * pricing.batchDiscount) } : {}) },
  };
}

type JudgeCheck = Extract<SpecCheck, { type: "judge" }>;
/** The judges' part of an estimate, and how their tokens were counted. */
export type JudgesEstimate = NonNullable<BatchEstimate["judges"]> & { tokens_method: BatchEstimate["tokens_method"] };

/**
 * The judges' calls: one per judge check and item, on the check's model (else the batch's), its
 * input the judge's instructions and its prompt (rubric, the item's prompt, its expected) with
 * the answer at the item's output estimate, its output JUDGE_OUTPUT_TOKENS. Counted as uncached
 * input (a judge's prompt carries no cache mark) and priced live: a provider batch's judges run
 * on the live lane. Null without judge checks.
 */
export async function estimateJudges(args: {
  rows: readonly ItemRow[];
  checks: readonly SpecCheck[];
  /** The answer each judge reads, in tokens: the item's output estimate. */
  answerTokens: number;
  /** The pricing of the model a check's judge runs on. */
  pricingOf: (check: JudgeCheck) => EstimatePricing;
}): Promise<JudgesEstimate | null> {
  const judges = args.checks.filter((c): c is JudgeCheck => c.type === "judge");
  if (judges.length === 0) return null;
  const breathe = turnEvery(20);
  let input = 0;
  let cost = 0;
  let method: BatchEstimate["tokens_method"] = "tiktoken";
  for (const check of judges) {
    const pricing = args.pricingOf(check);
    const counter = await tokenCounter(pricing);
    if (counter.method === "approx") method = "approx";
    const perCall = (await counter.count(JUDGE_SYSTEM)) + args.answerTokens;
    let checkInput = 0;
    for (const row of args.rows) {
      checkInput += perCall + (await counter.count(judgePrompt(check, { prompt: row.prompt, text: "", expected: row.expected })));
      await breathe();
    }
    input += checkInput;
    cost += (checkInput * pricing.input + args.rows.length * JUDGE_OUTPUT_TOKENS * pricing.output) / 1_000_000;
  }
  const calls = judges.length * args.rows.length;
  return { calls, input_tokens: input, output_tokens: calls * JUDGE_OUTPUT_TOKENS, cost_usd: usd(cost), tokens_method: method };
}

/** An items' estimate with its judges' calls added: their tokens in the totals, their live cost on both lanes. */
export function withJudges(estimate: BatchEstimate, judges: JudgesEstimate | null): BatchEstimate {
  if (!judges) return estimate;
  const { tokens_method, ...counted } = judges;
  const { live, provider_batch } = estimate.cost_usd;
  return {
    ...estimate,
    input_tokens: estimate.input_tokens + judges.input_tokens,
    output_tokens: estimate.output_tokens + judges.output_tokens,
    tokens_method: tokens_method === "approx" ? "approx" : estimate.tokens_method,
    cost_usd: { live: usd(live + judges.cost_usd), ...(provider_batch !== undefined ? { provider_batch: usd(provider_batch + judges.cost_usd) } : {}) },
    judges: counted,
  };
}

/** The catalog entry a spec's model name refers to (by catalog name, else by model id, as the price snapshot reads it). */
function entryOf(config: FlotillaConfig, name: string): CatalogEntry | undefined {
  const entries = catalogEntries(config);
  return entries.find((e) => e.name === name) ?? entries.find((e) => e.model === name);
}

/**
 * The estimate of a submission, as the door that takes it would write it: the same rules and
 * refusals as submitBatch (a submission_key already used still estimates), nothing written.
 */
export async function estimateBatch(db: DbOrTx, args: SubmitBatchArgs): Promise<BatchEstimate> {
  const prepared = await prepareSubmission(db, args, { replay: false });
  if ("replay" in prepared) throw new Error("estimateBatch: prepareSubmission answered a replay");
  const { rows, spec } = prepared;
  const pricingOf = (name: string): EstimatePricing => {
    const entry = entryOf(args.config, name);
    return entry
      ? estimatePricing(entry)
      : { provider: "openai-compatible", model: name, input: 0, output: 0, cachedInput: 0, cacheWrite: 0, batchDiscount: null };
  };
  const outputPerItem = outputAssumption(spec.output_schema, maxOutputTokensOf(args.definition));
  const items = await estimateRows({
    rows,
    systemPrompt: spec.subagent.system_prompt,
    template: args.input.prompt_template,
    pricing: pricingOf(spec.model.name),
    outputPerItem,
    examples: spec.examples,
  });
  const judges = await estimateJudges({
    rows,
    checks: spec.checks,
    answerTokens: outputPerItem.tokens,
    pricingOf: (check) => pricingOf(check.model ?? spec.model.name),
  });
  return { subagent: spec.subagent.name, model: spec.model.name, ...withJudges(items, judges) };
}

/** A definition's max_output_tokens, where its definitions carry one. */
function maxOutputTokensOf(definition: object): number | undefined {
  const n = (definition as { maxOutputTokens?: unknown }).maxOutputTokens;
  return typeof n === "number" && n > 0 ? n : undefined;
}

/** The cost the batch would run at: its lane's (the provider's batch lane when it asks for it and has one). */
export function laneCostUsd(estimate: BatchEstimate, lane: string | undefined): number {
  return lane === "provider_batch" && estimate.cost_usd.provider_batch !== undefined ? estimate.cost_usd.provider_batch : estimate.cost_usd.live;
}
