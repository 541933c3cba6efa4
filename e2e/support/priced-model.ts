/**
 * A priced model for the browser test of the chat's cost card (e2e/batch-confirm.spec.ts). The
 * simulator is free, so its batches never cost more than subagent_batches.confirm_over_usd (1.00)
 * and never ask. This catalog entry is priced so that a dozen items cost a few dollars, and only
 * the `appraiser` sub-agent runs on it: only batches that name it ask, and every other spec's
 * batches (on the simulator) run as before.
 *
 * The e2e server (playwright.config.ts) has the entry at an address nothing listens on: the web
 * process only prices it (the estimate, the batch's price snapshot) and never calls it. The spec's
 * worker has the same entry, under the same name, at a local fake OpenAI endpoint
 * (test/helpers/fake-openai.ts), where the items run. No imports: playwright.config.ts reads it.
 */

export const PRICED_MODEL = "e2e-priced";
export const PRICED_SUBAGENT = "appraiser";
/** The environment variable the entry's API key is read from (the worker's: the fake takes any key). */
export const PRICED_MODEL_KEY_ENV = "E2E_PRICED_MODEL_KEY";
/** The discard port: the web process's entry is never called. */
export const UNCALLED_BASE_URL = "http://127.0.0.1:9/v1";

/** The catalog entry (`models[]`): an openai model, so the card shows the provider batch lane too. */
export function pricedModelEntry(baseUrl: string) {
  return {
    name: PRICED_MODEL,
    provider: "openai",
    base_url: baseUrl,
    api_key_env: PRICED_MODEL_KEY_ENV,
    model: "gpt-4o-mini",
    price_per_million_input: 150,
    price_per_million_output: 600,
  };
}

/** The sub-agent (`subagents.definitions[]`) whose batches run on the priced model. */
export const PRICED_SUBAGENT_DEFINITION = {
  name: PRICED_SUBAGENT,
  description: "Appraises support tickets (runs on a priced model).",
  system_prompt: "You appraise one support ticket: how urgent it is, in one sentence.",
  model: PRICED_MODEL,
};
