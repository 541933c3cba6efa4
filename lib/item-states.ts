import type { ItemStatus } from "@/lib/api/batches";

/**
 * Each item state's one word, the same wherever it shows (the batch's counters, the Status
 * filter, the rows' badges), and what it means (the counters' tooltips). Screens only: the
 * engine's names stay in data-status, the API and every file (results.csv, results.jsonl).
 */
export const ITEM_STATES: Record<ItemStatus, { label: string; title: string }> = {
  pending: { label: "Pending", title: "Not started: waits for room in the batch's live window (max_live_items)" },
  queued: { label: "Queued", title: "Not started: in the live window, waits for a free worker slot" },
  leased: { label: "Starting", title: "A worker has taken it and is starting it" },
  running: { label: "Running", title: "A worker is running it" },
  awaiting_approval: { label: "Needs approval", title: "A tool call waits for a person's Approve or Deny (it holds no slot)" },
  succeeded: { label: "Done", title: "Finished with an answer" },
  failed: { label: "Failed", title: "Every attempt failed" },
  cancelled: { label: "Cancelled", title: "Stopped before it finished" },
};
