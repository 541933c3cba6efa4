import { sql } from "drizzle-orm";
import type { UnattendedNotice } from "@/lib/api/chat";
import type { FlotillaConfig } from "@/lib/config";
import { tokensUsedToday } from "@/server/batches/budget";
import type { DbOrTx } from "@/server/db/client";

/**
 * Lead runs nobody typed: a queued message's turn, and the wake-ups of settled batches and
 * background children. A typed message meets the daily token quota at the route (429); these
 * meet it here, before any model call. Wake-ups also meet chat.max_system_turns, so a child's
 * result cannot make the lead go on answering itself without a person. Refused, the thread gets
 * a short notice instead of a response (metadata.notice says why) and the model is not called.
 */
export interface Refusal {
  notice: UnattendedNotice;
  /** Why, as the end of a sentence shown in the thread. */
  why: string;
}

export async function refuseUnattended(
  db: DbOrTx,
  config: FlotillaConfig,
  input: { userId: string; threadId: string; wakeup: boolean },
): Promise<Refusal | undefined> {
  const quota = config.quotas.max_tokens_per_day;
  if (quota > 0) {
    const used = await tokensUsedToday(db, input.userId);
    if (used >= quota)
      return {
        notice: "daily_token_quota",
        why: `the daily token quota is used up (${used} of ${quota} tokens today, quotas.max_tokens_per_day); it resets at 00:00 UTC`,
      };
  }
  if (!input.wakeup) return undefined;
  const max = config.chat.max_system_turns;
  const turns = await systemTurnsInARow(db, input.threadId);
  if (turns >= max)
    return {
      notice: "system_turns",
      why: `I have answered ${turns} times in a row without a message from you (chat.max_system_turns is ${max}); send a message to let me go on`,
    };
  return undefined;
}

/**
 * The lead's wake-up responses (metadata.trigger) since the thread's last person's message
 * (queued ones are not in the conversation yet); notices are not responses.
 */
async function systemTurnsInARow(db: DbOrTx, threadId: string): Promise<number> {
  const [row] = await db.execute<{ n: number }>(sql`
    select count(*)::int as n from messages a
     where a.thread_id = ${threadId} and a.role = 'assistant'
       and a.metadata ? 'trigger' and not (a.metadata ? 'notice')
       and a.created_at > coalesce((
             select max(u.created_at) from messages u
              where u.thread_id = ${threadId} and u.role = 'user' and (u.metadata ->> 'queued') is distinct from 'true'),
           '-infinity')`);
  return row?.n ?? 0;
}
