import { defineConfig } from "@playwright/test";
import { E2E_DATA_DIR, E2E_FAKE_ANTHROPIC_PORT, E2E_FAKE_MODELS, E2E_LABELER, E2E_PG_PORT, E2E_PORT } from "./e2e/support/ports";
import { PRICED_SUBAGENT_DEFINITION, pricedModelEntry, UNCALLED_BASE_URL } from "./e2e/support/priced-model";

/**
 * Browser tests run the production build (`npm start`) in Debian's Chromium against a fresh
 * embedded PostgreSQL. Tests that need worker processes start and stop them themselves
 * (e2e/support/worker.ts), so the server here runs without one.
 */
export { E2E_DATA_DIR, E2E_FAKE_ANTHROPIC_PORT, E2E_FAKE_MODELS, E2E_LABELER, E2E_PG_PORT, E2E_PORT };

export default defineConfig({
  testDir: "e2e",
  outputDir: "test-results",
  timeout: 120_000,
  expect: { timeout: 20_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [["list"]],
  use: {
    baseURL: `http://localhost:${E2E_PORT}`,
    browserName: "chromium",
    viewport: { width: 1400, height: 900 },
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
      ],
    },
    trace: "off",
    screenshot: "only-on-failure",
  },
  webServer: {
    command: "bash scripts/e2e-server.sh",
    url: `http://localhost:${E2E_PORT}/api/health`,
    timeout: 600_000,
    reuseExistingServer: false,
    stdout: "pipe",
    stderr: "pipe",
    gracefulShutdown: { signal: "SIGTERM", timeout: 20_000 },
    env: {
      PORT: String(E2E_PORT),
      FLOTILLA_EMBEDDED_PORT: String(E2E_PG_PORT),
      FLOTILLA_DATA_DIR: E2E_DATA_DIR,
      FLOTILLA_WORKERS: "0",
      FLOTILLA__SIMULATOR__LATENCY_MS: process.env.FLOTILLA__SIMULATOR__LATENCY_MS ?? "150",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.2",
      FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: "5",
      // Specs register their own accounts; the invite flow works on an open deployment too
      // (a code that is sent is spent), and test/security covers the invite-only policy.
      FLOTILLA__AUTH__REGISTRATION: "open",
      // Approvals in the chat (e2e/chat-approvals.spec.ts): the lead's write_file and the
      // gatekeeper sub-agent's clock wait for a person, denied after 30 s. No other spec makes
      // those calls in the chat (batch items run in workers, with their own configuration).
      FLOTILLA__LEAD__TOOL_GROUPS: JSON.stringify(["workspace"]),
      FLOTILLA__TOOLS__REQUIRE_APPROVAL: JSON.stringify(["workspace/write_file"]),
      FLOTILLA__TOOLS__APPROVAL_TIMEOUT_SECONDS: "30",
      FLOTILLA__SUBAGENTS__DEFINITIONS: JSON.stringify([
        {
          name: "gatekeeper",
          description: "Reads the clock, with a person's approval.",
          system_prompt: "You read the clock when asked.",
          tool_groups: ["clock"],
          require_approval: ["clock"],
        },
        E2E_LABELER,
        // The chat's cost card (e2e/batch-confirm.spec.ts): batches that name this sub-agent run
        // on a priced model, so they cost more than confirm_over_usd and ask; none other does.
        PRICED_SUBAGENT_DEFINITION,
      ]),
      FLOTILLA__MODELS: JSON.stringify([...E2E_FAKE_MODELS, pricedModelEntry(UNCALLED_BASE_URL)]),
      // The specs stand behind a "proxy" on loopback so each API registration can come from its
      // own address (e2e/support/auth.ts): sixty specs registering from one address would meet
      // the per-address registration limit (30 an hour) that test/security checks.
      FLOTILLA__HTTP__TRUSTED_PROXIES: JSON.stringify(["127.0.0.1/32", "::1/128"]),
      // No NEXTAUTH_URL, as `npm start` runs by default: redirects follow the request's host.
      // Keep the server's JSON logs out of the test report unless something goes wrong.
      LOG_LEVEL: process.env.LOG_LEVEL ?? "warn",
    },
  },
});
