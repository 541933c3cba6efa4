import { createHmac, randomBytes } from "node:crypto";
import { eq, sql } from "drizzle-orm";
import type { FlotillaConfig } from "@/lib/config";
import type { Db, DbOrTx } from "@/server/db/client";
import { userWebhooks } from "@/server/db/schema";
import { AppError, errorText } from "@/server/errors";
import { log } from "@/server/log";

/**
 * Per-user webhook on batch settlement. The settling transaction inserts one delivery row per
 * (batch, settlement) with its JSON body fixed (loop migration trigger); a web process claims
 * due rows with a lease, POSTs the body signed with HMAC-SHA256 of the raw bytes
 * (`X-Flotilla-Signature: sha256=<hex>`), and records the outcome. A non-2xx or network error
 * is retried with exponential backoff up to WEBHOOK_MAX_ATTEMPTS, then the row is `failed`.
 */

export const WEBHOOK_MAX_ATTEMPTS = 6;
export const WEBHOOK_TIMEOUT_MS = 10_000;
const LEASE_SECONDS = 30;
const LOOPBACK = new Set(["localhost", "127.0.0.1", "[::1]", "::1"]);

export function signBody(secret: string, body: string): string {
  return `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
}

/** https anywhere; http only to a loopback host that tools.web_allow_hosts lists (local receivers, tests). */
export function validateWebhookUrl(config: FlotillaConfig, value: string): string {
  if (typeof value !== "string" || !URL.canParse(value)) throw new AppError("validation_failed", "url: must be an absolute URL");
  const url = new URL(value);
  if (url.username || url.password) throw new AppError("validation_failed", "url: must not carry credentials");
  if (url.protocol === "https:") return url.toString();
  const host = url.hostname.toLowerCase();
  const allowed = config.tools.web_allow_hosts.map((h) => h.toLowerCase());
  if (url.protocol === "http:" && LOOPBACK.has(host) && (allowed.includes(host) || allowed.includes(url.host.toLowerCase())))
    return url.toString();
  throw new AppError(
    "validation_failed",
    "url: must be https (plain http only to a loopback host listed in tools.web_allow_hosts)",
  );
}

export async function getWebhook(db: DbOrTx, userId: string): Promise<{ url: string; createdAt: Date; updatedAt: Date } | null> {
  const [row] = await db
    .select({ url: userWebhooks.url, createdAt: userWebhooks.createdAt, updatedAt: userWebhooks.updatedAt })
    .from(userWebhooks)
    .where(eq(userWebhooks.userId, userId));
  return row ?? null;
}

/** Sets the URL and issues a new signing secret, returned only here (shown once). */
export async function setWebhook(
  db: Db,
  args: { config: FlotillaConfig; userId: string; url: string },
): Promise<{ url: string; secret: string; createdAt: Date; updatedAt: Date }> {
  const url = validateWebhookUrl(args.config, args.url);
  const secret = `whsec_${randomBytes(24).toString("base64url")}`;
  const [row] = await db
    .insert(userWebhooks)
    .values({ userId: args.userId, url, secret })
    .onConflictDoUpdate({ target: userWebhooks.userId, set: { url, secret, updatedAt: sql`now()` } })
    .returning();
  return { url: row!.url, secret, createdAt: row!.createdAt, updatedAt: row!.updatedAt };
}

export async function deleteWebhook(db: Db, userId: string): Promise<boolean> {
  const rows = await db.delete(userWebhooks).where(eq(userWebhooks.userId, userId)).returning({ id: userWebhooks.userId });
  return rows.length > 0;
}

type DueDelivery = {
  id: number;
  url: string;
  body: Record<string, unknown>;
  attempts: number;
  secret: string | null;
  batch_id: string;
};

/**
 * Claims up to `limit` due deliveries for `owner` (SKIP LOCKED + lease: one process per row),
 * POSTs each and records the result. Returns how many were attempted.
 */
export async function deliverDueWebhooks(
  db: Db,
  args: { owner: string; limit?: number; backoffBaseMs?: number; fetchImpl?: typeof fetch },
): Promise<number> {
  const rows = await db.execute<DueDelivery>(sql`
    with due as (
      select id from webhook_deliveries
       where status = 'pending' and next_attempt_at <= now() and (lease_expires_at is null or lease_expires_at < now())
       order by next_attempt_at, id limit ${args.limit ?? 10}
       for update skip locked
    )
    update webhook_deliveries d
       set claimed_by = ${args.owner}, lease_expires_at = now() + make_interval(secs => ${LEASE_SECONDS}),
           attempts = d.attempts + 1
      from due
     where d.id = due.id
    returning d.id, d.url, d.body, d.attempts, d.batch_id,
              (select w.secret from user_webhooks w where w.user_id = d.user_id and w.url = d.url) as secret`);
  const doFetch = args.fetchImpl ?? fetch;
  const backoffBase = args.backoffBaseMs ?? 1_000;
  await Promise.all(
    rows.map(async (row) => {
      let statusCode: number | null = null;
      let error: string | null = null;
      if (row.secret === null) error = "the webhook was removed or its URL changed";
      else {
        const body = JSON.stringify(row.body);
        try {
          const res = await doFetch(row.url, {
            method: "POST",
            headers: {
              "content-type": "application/json",
              "user-agent": "Flotilla-Webhook/1",
              "x-flotilla-event": String(row.body.event ?? "batch.settled"),
              "x-flotilla-delivery": String(row.id),
              "x-flotilla-signature": signBody(row.secret, body),
            },
            body,
            redirect: "manual",
            signal: AbortSignal.timeout(WEBHOOK_TIMEOUT_MS),
          });
          statusCode = res.status;
          await res.body?.cancel().catch(() => {});
          if (res.status < 200 || res.status >= 300) error = `receiver answered HTTP ${res.status}`;
        } catch (err) {
          error = errorText(err);
        }
      }
      const final = row.secret === null || row.attempts >= WEBHOOK_MAX_ATTEMPTS;
      const delayMs = backoffBase * 2 ** (row.attempts - 1);
      await db.execute(sql`
        update webhook_deliveries set
          status = ${error === null ? "delivered" : final ? "failed" : "pending"},
          delivered_at = ${error === null ? sql`now()` : null},
          last_status_code = ${statusCode}, last_error = ${error},
          next_attempt_at = now() + make_interval(secs => ${delayMs / 1000}),
          claimed_by = null, lease_expires_at = null
        where id = ${row.id} and claimed_by = ${args.owner}`);
      if (error) log.warn({ delivery_id: row.id, batch_id: row.batch_id, attempt: row.attempts, err: error }, "webhook delivery failed");
    }),
  );
  return rows.length;
}
