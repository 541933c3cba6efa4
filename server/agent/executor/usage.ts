import { callTokenCount, outOfRange, type SubagentUsage, tokenCount } from "@/lib/api/subagents";

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

// A count out of range adds nothing: it is no count (the run's answer is refused, executor.ts).
const add = (a: number | undefined, b: number | undefined) => tokenCount((a ?? 0) + callTokenCount(b));

export function addStepUsage(total: SubagentUsage, step: StepUsage): SubagentUsage {
  const reported = [step.inputTokens, step.outputTokens, step.inputTokenDetails?.cacheReadTokens, step.inputTokenDetails?.cacheWriteTokens];
  const invalid = total.outOfRange === true || reported.some(outOfRange);
  return {
    ...(invalid ? { outOfRange: true } : {}),
    inputTokens: add(total.inputTokens, step.inputTokens),
    outputTokens: add(total.outputTokens, step.outputTokens),
    cachedInputTokens: add(total.cachedInputTokens, step.inputTokenDetails?.cacheReadTokens),
    cacheWriteTokens: add(total.cacheWriteTokens, step.inputTokenDetails?.cacheWriteTokens),
  };
}

/** The sum of several steps' usage. */
export function sumUsage(steps: readonly StepUsage[]): SubagentUsage {
  return steps.reduce<SubagentUsage>(addStepUsage, NO_USAGE);
}
