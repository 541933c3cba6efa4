import pino from "pino";

/**
 * Structured JSON logs (one line per event) from web and worker; pretty in development.
 * Attach ids with child loggers: log.child({ run_id, batch_id, item_id, worker_id }).
 */
const pretty = process.env.NODE_ENV === "development" || process.env.FLOTILLA_LOG_PRETTY === "1";

export const log = pino({
  level: process.env.LOG_LEVEL ?? (process.env.NODE_ENV === "test" || process.env.VITEST ? "silent" : "info"),
  base: { service: process.env.FLOTILLA_SERVICE ?? "flotilla" },
  ...(pretty ? { transport: { target: "pino-pretty", options: { colorize: true } } } : {}),
});
export type Logger = typeof log;
