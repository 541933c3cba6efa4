import { outOfRange, type SubagentUsage, TOKEN_COUNT_MAX, tokenCount } from "@/lib/api/subagents";

/**
 * The usage stage: the tokens a run spent, summed over its model steps as they finish (a run
 * cut short keeps what its finished steps spent). Cache reads and writes are counted inside the
 * input tokens, as the AI SDK reports them. Its cost is priced from these where the run is
 * shown or settled (runCostUsd in ../runs.ts, the worker's attemptCost for batch items).
 */

export const NO_USAGE: SubagentUsage = Object.freeze({
  inputTokens: 0,
  outputTokens: 0,
  cachedInputTokens: 0,
  cacheWriteTokens: 0,
});

/** A step's usage as the AI SDK reports it (a provider may leave a count out). */
export interface StepUsage {
  inputTokens?: number | undefined;
  outputTokens?: number | undefined;
  inputTokenDetails?: { cacheReadTokens?: number | undefined; cacheWriteTokens?: number | undefined };
}

const add = (a: number | undefined, b: number | undefined) => tokenCount((a ?? 0) + tokenCount(b));

export function addStepUsage(total: SubagentUsage, step: StepUsage): SubagentUsage {
  const reported = [step.inputTokens, step.outputTokens, step.inputTokenDetails?.cacheReadTokens, step.inputTokenDetails?.cacheWriteTokens];
  const clamped = total.clamped === true || reported.some(outOfRange);
  return {
    ...(clamped ? { clamped } : {}),
    inputTokens: add(total.inputTokens, step.inputTokens),
    outputTokens: add(total.outputTokens, step.outputTokens),
    cachedInputTokens: add(total.cachedInputTokens, step.inputTokenDetails?.cacheReadTokens),
    cacheWriteTokens: add(total.cacheWriteTokens, step.inputTokenDetails?.cacheWriteTokens),
  };
}

/** The note a run whose provider reported counts out of range settles with (its stop_reason). */
export function clampNote(stopReason: string | null | undefined): string {
  return `${stopReason ?? "stop"}; token counts the provider reported were out of range and are stored clamped to 0..${TOKEN_COUNT_MAX}`;
}

/** The sum of several steps' usage. */
export function sumUsage(steps: readonly StepUsage[]): SubagentUsage {
  return steps.reduce<SubagentUsage>(addStepUsage, NO_USAGE);
}
