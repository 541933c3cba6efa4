import { type SubmitBatchInput, submitBatchSchema } from "@/lib/api/batches";
import type { FlotillaConfig } from "@/lib/config";
import { AppError, zodMessage } from "@/server/errors";

/** Longest prompt one item may carry after template expansion. */
export const MAX_ITEM_PROMPT_CHARS = 100_000;
export const ITEM_PLACEHOLDER = "{{item}}";

export interface NormalizedSubmission {
  submissionKey: string;
  subagent: string;
  maxLiveItems: number;
  maxRunningItems: number;
  maxTotalTokens: number | null;
  maxCostUsd: number | null;
  /** In position order (position = index + 1). `input` is what the owner sees of each item. */
  items: { key: string; prompt: string; input: string }[];
}

const invalid = (message: string) => new AppError("validation_failed", message);

/** Total characters of the prompts a submission expands to, from the template's shape and the items' lengths. */
export function totalPromptChars(items: SubmitBatchInput["items"], template: string | undefined): number {
  const slots = template === undefined ? 0 : template.split(ITEM_PLACEHOLDER).length - 1;
  const fixed = template === undefined ? 0 : template.length - slots * ITEM_PLACEHOLDER.length;
  let total = 0;
  for (const item of items) {
    if (typeof item !== "string") total += item.prompt.length;
    else total += template === undefined ? item.length : fixed + slots * item.length;
  }
  return total;
}

/**
 * Validates a whole submission before anything is written: shape, count ≤ max_items_per_batch,
 * unique item keys (explicit keys win; the rest are item-1, item-2, ... by position), limits
 * within their configured ranges, template expansion. Errors name the field.
 */
export function normalizeSubmission(input: SubmitBatchInput, config: FlotillaConfig): NormalizedSubmission {
  const limits = config.subagent_batches;
  if (Array.isArray(input?.items) && input.items.length > limits.max_items_per_batch)
    throw invalid(`items: at most ${limits.max_items_per_batch} items per batch (got ${input.items.length})`);
  const parsed = submitBatchSchema.safeParse(input);
  if (!parsed.success) throw invalid(zodMessage(parsed.error));
  const data = parsed.data;

  const maxLive = data.max_live_items ?? limits.default_max_live_items;
  if (maxLive < 1 || maxLive > limits.max_live_items_per_batch)
    throw invalid(`max_live_items: must be between 1 and ${limits.max_live_items_per_batch}`);
  const maxRunning = data.max_running_items ?? limits.default_max_running_items;
  if (maxRunning < 1 || maxRunning > limits.max_running_items_per_batch)
    throw invalid(`max_running_items: must be between 1 and ${limits.max_running_items_per_batch}`);

  const template = data.prompt_template;
  if (template !== undefined && !template.includes(ITEM_PLACEHOLDER))
    throw invalid(`prompt_template: must contain ${ITEM_PLACEHOLDER}`);

  // The expanded size is known from lengths alone: refuse it before building any prompt.
  const expandedChars = totalPromptChars(data.items, template);
  if (expandedChars > limits.max_total_prompt_chars)
    throw new AppError(
      "payload_too_large",
      `items: the expanded prompts would total ${expandedChars} characters; at most ${limits.max_total_prompt_chars} per batch (subagent_batches.max_total_prompt_chars)`,
    );

  const seen = new Map<string, number>();
  const items = data.items.map((item, index) => {
    const explicitKey = typeof item === "string" ? undefined : item.item_key;
    const key = explicitKey ?? `item-${index + 1}`;
    const first = seen.get(key);
    if (first !== undefined)
      throw invalid(`items.${index}.item_key: duplicate item_key "${key}" (first used by items.${first})`);
    seen.set(key, index);
    const prompt =
      typeof item === "string" ? (template !== undefined ? template.split(ITEM_PLACEHOLDER).join(item) : item) : item.prompt;
    if (prompt.length > MAX_ITEM_PROMPT_CHARS)
      throw invalid(`items.${index}: prompt is ${prompt.length} characters; at most ${MAX_ITEM_PROMPT_CHARS} per item`);
    // The one place an item's input is decided: the string that filled {{item}}, or the explicit prompt.
    const input = typeof item === "string" ? item : item.prompt;
    return { key, prompt, input };
  });

  return {
    submissionKey: data.submission_key,
    subagent: data.subagent ?? "general",
    maxLiveItems: maxLive,
    maxRunningItems: maxRunning,
    maxTotalTokens: data.max_total_tokens ?? null,
    maxCostUsd: data.max_cost_usd ?? null,
    items,
  };
}
