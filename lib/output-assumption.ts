import type { BatchEstimate } from "./api/batches";
import { formatCount } from "./format";

/** What an estimate's output figure assumes an item writes, and where the figure comes from (the dialog and the chat's card). */
export function outputAssumptionText(a: NonNullable<BatchEstimate["output_per_item"]>): string {
  const from = {
    output_schema: "a typical answer of the output schema",
    max_output_tokens: "the sub-agent's max_output_tokens",
    default: "assumed; an output schema gives a closer figure",
  }[a.from];
  return `${formatCount(a.tokens)} an item: ${from}`;
}
