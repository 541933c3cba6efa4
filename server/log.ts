import pino from "pino";
import { redactError } from "@/server/ops/db-errors";

/**
 * Structured JSON logs (one line per event) from web and worker; pretty in development.
 * Attach ids with child loggers: log.child({ run_id, batch_id, item_id, worker_id }).
 */
const pretty = process.env.NODE_ENV === "development" || process.env.FLOTILLA_LOG_PRETTY === "1";

/** Fields that never reach a log line: credentials and a query's bound values. */
export const REDACT_PATHS = [
  "password",
  "*.password",
  "passwordHash",
  "*.passwordHash",
  "password_hash",
  "*.password_hash",
  "token",
  "*.token",
  "authorization",
  "*.authorization",
  "headers.cookie",
  "*.headers.cookie",
  "params",
  "*.params",
  "parameters",
  "*.parameters",
];

export const log = pino({
  level: process.env.LOG_LEVEL ?? (process.env.NODE_ENV === "test" || process.env.VITEST ? "silent" : "info"),
  base: { service: process.env.FLOTILLA_SERVICE ?? "flotilla" },
  redact: { paths: REDACT_PATHS, censor: "[redacted]" },
  serializers: { err: redactError },
  ...(pretty ? { transport: { target: "pino-pretty", options: { colorize: true } } } : {}),
});
export type Logger = typeof log;
