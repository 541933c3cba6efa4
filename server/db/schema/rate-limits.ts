import { at } from "./columns";
import { bigint, pgTable, text, } from "drizzle-orm/pg-core";

/**
 * One row per model endpoint: the shared request/token budget every web and worker process
 * draws from (server/runtime/rate-limit.ts). Times are PostgreSQL's clock, so processes on
 * machines with skewed clocks still agree.
 *
 * The budget is a virtual schedule (GCRA): `next_request_at` / `next_token_at` are the
 * instants from which the next request may start without exceeding requests-per-minute /
 * tokens-per-minute. A reservation moves them forward in one UPDATE ... RETURNING.
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
});
