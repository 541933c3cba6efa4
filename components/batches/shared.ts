import { ApiError } from "@/lib/api/client";

/** Poll cadence: about every 2 s while anything can still change, rarely once all is terminal. */
export const ACTIVE_POLL_MS = 2_000;
export const IDLE_POLL_MS = 30_000;
export const FEATURES_POLL_MS = 10_000;

export const NO_WORKER_TITLE = "No worker is running, so batch controls are disabled (start one with npm run worker).";

export function errorMessage(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  return err instanceof Error ? err.message : "Something went wrong.";
}
