import type { SubagentUsage } from "@/lib/api/subagents";

/**
 * The usage stage: the tokens a run spent, summed over its model steps as they finish (a run
 * cut short keeps what its finished steps spent). Its cost is priced from these where the run
 * is shown or settled (runCostUsd in ../runs.ts, settle.sql for batch items).
 */

export const NO_USAGE: SubagentUsage = Object.freeze({ inputTokens: 0, outputTokens: 0 });

/** A step's usage as the AI SDK reports it (a provider may leave a count out). */
export interface StepUsage {
  inputTokens?: number | undefined;
  outputTokens?: number | undefined;
}

export function addStepUsage(total: SubagentUsage, step: StepUsage): SubagentUsage {
  return {
    inputTokens: total.inputTokens + (step.inputTokens ?? 0),
    outputTokens: total.outputTokens + (step.outputTokens ?? 0),
  };
}

/** The sum of several steps' usage. */
export function sumUsage(steps: readonly StepUsage[]): SubagentUsage {
  return steps.reduce<SubagentUsage>(addStepUsage, NO_USAGE);
}
