import { formatCount, formatUsd } from "./format";

/**
 * What a whole batch will cost, projected from its pilot's real usage (its spend so far over the
 * items that finished, times every item), for the panel, the receipt and the lead's wake-up
 * notice alike. Null before an item finished. Pure and client-safe.
 */
export interface PilotProjection {
  /** The pilot's items that finished (succeeded or failed). */
  ran: number;
  /** What one finished item cost on average. */
  perItemUsd: number;
  /** The whole batch: the spend so far and the rest at the pilot's rate. */
  totalUsd: number;
}

export function projectFromPilot(b: { total: number; succeeded: number; failed: number; costUsd: number }): PilotProjection | null {
  const ran = b.succeeded + b.failed;
  if (ran <= 0 || !Number.isFinite(b.costUsd) || b.costUsd < 0) return null;
  const perItemUsd = b.costUsd / ran;
  return { ran, perItemUsd, totalUsd: b.costUsd + Math.max(0, b.total - ran) * perItemUsd };
}

/** "Projected from the pilot: $1.20 for all 5,000 items ($0.0002 an item)." — the same words on every screen and in the lead's notice. */
export function projectionSentence(total: number, p: PilotProjection): string {
  return `Projected from the pilot: ${formatUsd(p.totalUsd)} for all ${formatCount(total)} items (${perItem(p.perItemUsd)} an item).`;
}

/** An item's cost is often under a hundredth of a cent: two significant digits there ($0.000052), not $0.0001. */
const perItem = (usd: number) => (usd > 0 && usd < 0.01 ? `$${Number(usd.toPrecision(2))}` : formatUsd(usd));
