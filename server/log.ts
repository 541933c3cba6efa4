import pino from "pino";
import { logError } from "@/server/errors";

/**
 * Logs of web and worker. On a terminal: short, colourized lines (pino-pretty) a person can
 * read. Otherwise (piped, a service manager, CI) or with LOG_FORMAT=json: one JSON object per
 * line for a log system. LOG_FORMAT=pretty forces the short lines.
 * Attach ids with child loggers: log.child({ run_id, batch_id, item_id, worker_id }).
 */
export function wantsPrettyLogs(env: Record<string, string | undefined> = process.env, isTTY = Boolean(process.stdout.isTTY)): boolean {
  const format = env.LOG_FORMAT?.toLowerCase();
  if (format === "json") return false;
  if (format === "pretty" || env.FLOTILLA_LOG_PRETTY === "1") return true;
  return isTTY || env.NODE_ENV === "development";
}

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
  serializers: { err: logError },
  ...(wantsPrettyLogs()
    ? {
        transport: {
          target: "pino-pretty",
          // One short line per event: time, level, service and message; the ids stay on the line.
          options: { colorize: true, translateTime: "HH:MM:ss", ignore: "pid,hostname,service", singleLine: true, messageFormat: "[{service}] {msg}" },
        },
      }
    : {}),
});
export type Logger = typeof log;
