/**
 * Where the browser tests' server, database and fakes listen, and the catalog entries that point
 * at the fakes. No imports: playwright.config.ts reads it, and so do the specs' helpers.
 */
export const E2E_PORT = Number(process.env.E2E_PORT ?? 3100);
export const E2E_PG_PORT = Number(process.env.E2E_PG_PORT ?? 54339);
export const E2E_DATA_DIR = process.env.E2E_DATA_DIR ?? ".data/e2e";

/**
 * The provider batch lane (e2e/provider-lane.spec.ts) needs an anthropic model: a catalog entry
 * whose base URL is the fake Anthropic API (test/helpers/fake-anthropic.ts) that spec starts on this
 * port, and the "labeler" sub-agent (no tools) on it. The default model stays the simulator, and
 * the New batch dialog's default sub-agent stays "general", so other specs see no difference.
 */
export const E2E_FAKE_ANTHROPIC_PORT = Number(process.env.E2E_FAKE_ANTHROPIC_PORT ?? E2E_PORT + 10_000);
export const E2E_FAKE_MODELS = [
  {
    name: "claude-fake",
    provider: "anthropic",
    base_url: `http://127.0.0.1:${E2E_FAKE_ANTHROPIC_PORT}/v1`,
    api_key_env: "E2E_FAKE_ANTHROPIC_KEY",
    model: "claude-sonnet-4-5",
    price_per_million_input: 3,
    price_per_million_output: 15,
  },
];
export const E2E_LABELER = {
  name: "labeler",
  description: "Labels a support ticket with one word (the fake Anthropic model; offers the provider batch lane).",
  system_prompt: "You label support tickets. Answer with one word.",
  tool_groups: [],
  model: "claude-fake",
};
