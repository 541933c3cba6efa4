import { at } from "./columns";
import { bigint, doublePrecision, pgTable, text } from "drizzle-orm/pg-core";

/**
 * One row per model endpoint: the shared request/token budget every web and worker process
 * draws from (server/runtime/rate-limit.ts). Times are PostgreSQL's clock, so processes on
 * machines with skewed clocks still agree.
 *
 * The budget is a virtual schedule (GCRA): `next_request_at` / `next_token_at` are the
 * instants from which the next request may start without exceeding requests-per-minute /
 * tokens-per-minute. A reservation moves them forward in one UPDATE ... RETURNING.
 *
 * The `learned_*` limits (per minute) and `share_*` factors come from the provider's own
 * rate-limit headers (server/runtime/provider-limits.ts): the schedule runs at the least of the
 * stated limit and learned limit × share, the share shrinking while `remaining` says another
 * program drains the same key.
 */
export const modelRateLimits = pgTable("model_rate_limits", {
  endpoint: text("endpoint").primaryKey(),
  nextRequestAt: at("next_request_at").notNull().defaultNow(),
  nextTokenAt: at("next_token_at").notNull().defaultNow(),
  /** Set from a provider 429's retry-after: no process starts a call on this endpoint before it. */
  slowUntil: at("slow_until"),
  // Lifetime totals for operators (the workers view and metrics read them).
  requests: bigint("requests", { mode: "number" }).notNull().default(0),
  tokens: bigint("tokens", { mode: "number" }).notNull().default(0),
  rateLimited: bigint("rate_limited", { mode: "number" }).notNull().default(0),
  lastRateLimitedAt: at("last_rate_limited_at"),
  updatedAt: at("updated_at").notNull().defaultNow(),
  /** Input and output tokens where the provider counts them apart (Anthropic). */
  nextInputTokenAt: at("next_input_token_at").notNull().defaultNow(),
  nextOutputTokenAt: at("next_output_token_at").notNull().defaultNow(),
  learnedRequestsPerMinute: doublePrecision("learned_requests_per_minute"),
  learnedTokensPerMinute: doublePrecision("learned_tokens_per_minute"),
  learnedInputTokensPerMinute: doublePrecision("learned_input_tokens_per_minute"),
  learnedOutputTokensPerMinute: doublePrecision("learned_output_tokens_per_minute"),
  shareRequests: doublePrecision("share_requests").notNull().default(1),
  shareTokens: doublePrecision("share_tokens").notNull().default(1),
  shareInputTokens: doublePrecision("share_input_tokens").notNull().default(1),
  shareOutputTokens: doublePrecision("share_output_tokens").notNull().default(1),
  /**
   * Tokens a call really used, averaged over recent answers: debited up front beside the
   * prompt's own estimate, so calls in flight are not under-counted until they settle.
   */
  tokensPerCall: doublePrecision("tokens_per_call"),
  inputTokensPerCall: doublePrecision("input_tokens_per_call"),
  outputTokensPerCall: doublePrecision("output_tokens_per_call"),
  /** Last header-carrying answer. */
  learnedAt: at("learned_at"),
  /** First answer of any kind: until then one probe call finds out whether the provider sends limits. */
  answeredAt: at("answered_at"),
  probeAt: at("probe_at"),
  /** Last time a batch call was held because the schedule ran more than its horizon ahead. */
  heldAt: at("held_at"),
});
