import { settleItems } from "@/server/batches/claim";
import type { Settlement } from "@/server/batches/settlement";
import type { DbOrTx } from "@/server/db/client";
import type { ItemStatus } from "@/server/db/schema/batches";
import { errorText } from "@/server/errors";
import { isDatabaseUnavailable } from "@/server/ops/db-errors";

/** The longest reason a `storage_refused` error quotes. */
const REFUSAL_CHARS = 500;

/**
 * A settlement PostgreSQL refused, as the item's final failure: `storage_refused: <why>`, not
 * retried (another attempt would produce the same text), without what could not be stored (its
 * result, output, checks, approvals, run row); the tokens it spent still count.
 */
export function refusedSettlement(s: Settlement, err: unknown): Settlement {
  const why = errorText(err).slice(0, REFUSAL_CHARS);
  return {
    id: s.id,
    leaseToken: s.leaseToken,
    ...(s.startedAtMs !== undefined ? { startedAtMs: s.startedAtMs } : {}),
    ...(s.steps ? { steps: true } : {}),
    kind: "failed",
    retryable: false,
    error: `storage_refused: ${why}`,
    ...("usage" in s && s.usage ? { usage: s.usage } : {}),
    ...("model" in s ? { model: s.model } : {}),
  };
}

/**
 * The fallback when a round trip that settles several items is refused for anything but the
 * database being away: each settlement in its own statement, so a row PostgreSQL refuses fails
 * alone (as `refusedSettlement`) and the others are stored. `written`: the settlements as sent
 * (a refused one replaced by its failure); `settled`: the new status of each that moved (a fenced
 * one did not). A failure that cannot be written either is given up (`dropped`: its lease expires
 * and recovery takes the item). `unsettled`: the database went away meanwhile; the caller keeps
 * them for its next round trip.
 */
export async function settleEach(
  db: DbOrTx,
  args: { workerId: string; settlements: readonly Settlement[]; maxDeferrals: number },
): Promise<{ settled: Map<string, ItemStatus>; written: Settlement[]; refused: string[]; dropped: string[]; unsettled: Settlement[] }> {
  const out = {
    settled: new Map<string, ItemStatus>(),
    written: [] as Settlement[],
    refused: [] as string[],
    dropped: [] as string[],
    unsettled: [] as Settlement[],
  };
  const write = async (s: Settlement) => {
    const moved = await settleItems(db, { ...args, settlements: [s] });
    for (const [id, status] of moved) out.settled.set(id, status);
    out.written.push(s);
  };
  for (const [i, s] of args.settlements.entries()) {
    let refusal: unknown;
    try {
      await write(s);
      continue;
    } catch (err) {
      refusal = err;
    }
    try {
      if (isDatabaseUnavailable(refusal)) throw refusal;
      await write(refusedSettlement(s, refusal));
      out.refused.push(s.id);
    } catch (err) {
      if (isDatabaseUnavailable(err)) {
        out.unsettled.push(...args.settlements.slice(i));
        break;
      }
      out.dropped.push(s.id);
    }
  }
  return out;
}
