import { createHmac, randomBytes } from "node:crypto";
import http from "node:http";
import https from "node:https";
import { eq, sql } from "drizzle-orm";
import { Webhook } from "standardwebhooks";
import type { FlotillaConfig } from "@/lib/config";
import type { Db, DbOrTx } from "@/server/db/client";
import { userWebhooks } from "@/server/db/schema";
import { AppError, errorText } from "@/server/errors";
import { log } from "@/server/log";
import { storableText } from "@/server/db/storable";
import { type Address, allowListed, destinationOf, pinnedTo, urlHost } from "@/server/net/addresses";

/**
 * Per-user webhook on batch events, signed the Standard Webhooks way (`webhook-id`,
 * `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`).
 * The transaction that settles or pauses a batch inserts one delivery row per event with its
 * JSON body fixed (drizzle/0013_webhook_events.sql); a web process claims due rows fairly (a
 * per-user limit inside its pool), checks the URL's addresses again, POSTs to the checked
 * address, and records the outcome. A non-2xx or network error is retried with exponential
 * backoff up to WEBHOOK_MAX_ATTEMPTS, then the row is `failed`; a refused address is `refused`
 * at once, without a request.
 */

export const WEBHOOK_MAX_ATTEMPTS = 6;
export const WEBHOOK_TIMEOUT_MS = 10_000;
/** Deliveries one user may have in flight at once, across every web process. */
export const WEBHOOK_PER_USER_LIMIT = 2;
const LEASE_SECONDS = 30;

/** The headers of one delivery attempt; `legacy` secrets (issued before Standard Webhooks) also sign the old way. */
export function signDelivery(
  secret: string,
  legacy: boolean,
  msgId: string,
  at: Date,
  body: string,
): Record<string, string> {
  // A legacy secret's key is its own bytes (as the old body-only HMAC used it): `format: "raw"`.
  const webhook = legacy ? new Webhook(secret, { format: "raw" }) : new Webhook(secret);
  const headers: Record<string, string> = {
    "webhook-id": msgId,
    "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
    "webhook-signature": webhook.sign(msgId, at, body),
  };
  if (legacy) headers["x-flotilla-signature"] = `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
  return headers;
}

class RefusedUrl extends Error {}

/**
 * The address a delivery to `url` connects to: every address the host resolves to must be public
 * (unless allow-listed), and the connection then goes to the first of them, so a DNS answer that
 * changes between this check and the connect cannot reach inside.
 */
async function checkedAddress(config: FlotillaConfig, url: URL): Promise<Address> {
  const host = urlHost(url);
  if (url.protocol !== "https:" && !(allowListed(config.webhooks.allow_hosts, url) && url.protocol === "http:"))
    throw new RefusedUrl("must be https (plain http only to a host listed in webhooks.allow_hosts)");
  // A failed lookup is no refusal: a delivery retries it later (saving answers 400 at once).
  const { address, refused } = await destinationOf(url, config.webhooks.allow_hosts);
  if (refused)
    throw new RefusedUrl(
      `${refused.address === host ? `${host} is` : `${host} resolves to ${refused.address},`} a loopback, private, link-local ` +
        "or reserved address; webhooks go to public addresses only",
    );
  return address;
}

/** https to a public address (http or a private one only when webhooks.allow_hosts lists the host). */
export async function validateWebhookUrl(config: FlotillaConfig, value: string): Promise<string> {
  if (typeof value !== "string" || !URL.canParse(value)) throw new AppError("validation_failed", "url: must be an absolute URL");
  const url = new URL(value);
  if (url.username || url.password) throw new AppError("validation_failed", "url: must not carry credentials");
  try {
    await checkedAddress(config, url);
  } catch (err) {
    throw new AppError("validation_failed", `url: ${err instanceof RefusedUrl ? err.message : `cannot be resolved (${errorText(err)})`}`);
  }
  return url.toString();
}

export interface WebhookSettings {
  url: string;
  /** The secret predates Standard Webhooks signatures: deliveries also carry X-Flotilla-Signature until a new one is taken. */
  legacySecret: boolean;
  createdAt: Date;
  updatedAt: Date;
}

export async function getWebhook(db: DbOrTx, userId: string): Promise<WebhookSettings | null> {
  const [row] = await db
    .select({ url: userWebhooks.url, signing: userWebhooks.signing, createdAt: userWebhooks.createdAt, updatedAt: userWebhooks.updatedAt })
    .from(userWebhooks)
    .where(eq(userWebhooks.userId, userId));
  return row ? { url: row.url, legacySecret: row.signing === "legacy", createdAt: row.createdAt, updatedAt: row.updatedAt } : null;
}

/** Sets the URL and issues a new signing secret (`whsec_` + base64 of 32 random bytes), returned only here (shown once). */
export async function setWebhook(
  db: Db,
  args: { config: FlotillaConfig; userId: string; url: string },
): Promise<WebhookSettings & { secret: string }> {
  const url = await validateWebhookUrl(args.config, args.url);
  const secret = `whsec_${randomBytes(32).toString("base64")}`;
  const [row] = await db
    .insert(userWebhooks)
    .values({ userId: args.userId, url, secret, signing: "standard" })
    .onConflictDoUpdate({ target: userWebhooks.userId, set: { url, secret, signing: "standard", updatedAt: sql`now()` } })
    .returning();
  return { url: row!.url, secret, legacySecret: false, createdAt: row!.createdAt, updatedAt: row!.updatedAt };
}

export async function deleteWebhook(db: Db, userId: string): Promise<boolean> {
  const rows = await db.delete(userWebhooks).where(eq(userWebhooks.userId, userId)).returning({ id: userWebhooks.userId });
  return rows.length > 0;
}

export interface ClaimedDelivery extends Record<string, unknown> {
  id: number;
  user_id: string;
  event_id: string;
  url: string;
  body: Record<string, unknown>;
  attempts: number;
  secret: string | null;
  signing: string | null;
  batch_id: string;
}

/**
 * Claims up to `limit` due deliveries for `owner` (SKIP LOCKED + lease: one process per row),
 * fairly: round-robin over the users with due rows, each user at most `perUser` in flight
 * (live leases of any process count), so one user's backlog never fills the pool.
 */
export async function claimDeliveries(
  db: Db,
  args: { owner: string; limit: number; perUser?: number },
): Promise<ClaimedDelivery[]> {
  if (args.limit <= 0) return [];
  const perUser = args.perUser ?? WEBHOOK_PER_USER_LIMIT;
  return db.execute<ClaimedDelivery>(sql`
    with due_users as (
      select distinct user_id from webhook_deliveries
       where status = 'pending' and next_attempt_at <= now() and (lease_expires_at is null or lease_expires_at < now())
    ),
    picked as (
      select c.id, c.next_attempt_at, row_number() over (partition by c.user_id order by c.next_attempt_at, c.id) as turn
        from due_users u
        cross join lateral (
          select d.id, d.user_id, d.next_attempt_at from webhook_deliveries d
           where d.user_id = u.user_id and d.status = 'pending' and d.next_attempt_at <= now()
             and (d.lease_expires_at is null or d.lease_expires_at < now())
           order by d.next_attempt_at, d.id
           limit greatest(0, ${perUser} - (
             select count(*) from webhook_deliveries f
              where f.user_id = u.user_id and f.status = 'pending' and f.lease_expires_at >= now()))
           for update skip locked
        ) c
    ),
    chosen as (select id from picked order by turn, next_attempt_at, id limit ${args.limit})
    update webhook_deliveries d
       set claimed_by = ${args.owner}, lease_expires_at = now() + make_interval(secs => ${LEASE_SECONDS}),
           attempts = d.attempts + 1
      from chosen
     where d.id = chosen.id
    returning d.id, d.user_id, d.event_id, d.url, d.body, d.attempts, d.batch_id,
              (select w.secret from user_webhooks w where w.user_id = d.user_id and w.url = d.url) as secret,
              (select w.signing from user_webhooks w where w.user_id = d.user_id and w.url = d.url) as signing`);
}

type Outcome = { status: "delivered" | "failed" | "pending" | "refused"; statusCode: number | null; error: string | null };

/** One POST to the checked address; resolves with the HTTP status (the body is discarded). */
function post(url: URL, address: Address, headers: Record<string, string>, body: string): Promise<number> {
  const client = url.protocol === "https:" ? https : http;
  return new Promise((resolve, reject) => {
    const req = client.request(
      url,
      {
        method: "POST",
        ...pinnedTo(url, address),
        signal: AbortSignal.timeout(WEBHOOK_TIMEOUT_MS),
        headers: { ...headers, "content-type": "application/json", "user-agent": "Flotilla-Webhook/2", "content-length": Buffer.byteLength(body) },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/** Attempts one claimed delivery and records the outcome (only while `owner` still holds it). */
export async function deliverClaimed(
  db: Db,
  row: ClaimedDelivery,
  args: { owner: string; config: FlotillaConfig; backoffBaseMs?: number },
): Promise<Outcome> {
  let outcome: Outcome;
  if (row.secret === null) outcome = { status: "failed", statusCode: null, error: "the webhook was removed or its URL changed" };
  else {
    const url = new URL(row.url);
    let address: Address | undefined;
    try {
      address = await checkedAddress(args.config, url);
      outcome = { status: "pending", statusCode: null, error: null };
    } catch (err) {
      outcome =
        err instanceof RefusedUrl
          ? { status: "refused", statusCode: null, error: `refused: ${err.message}` }
          : { status: "pending", statusCode: null, error: errorText(err) };
    }
    if (address) {
      const body = JSON.stringify(row.body);
      const msgId = `msg_${row.event_id.replace(/-/g, "")}`;
      try {
        const code = await post(url, address, signDelivery(row.secret, row.signing === "legacy", msgId, new Date(), body), body);
        outcome = { status: "pending", statusCode: code, error: code >= 200 && code < 300 ? null : `receiver answered HTTP ${code}` };
      } catch (err) {
        outcome = { status: "pending", statusCode: null, error: errorText(err) };
      }
    }
    if (outcome.status === "pending")
      outcome.status = outcome.error === null ? "delivered" : row.attempts >= WEBHOOK_MAX_ATTEMPTS ? "failed" : "pending";
  }
  const delayMs = (args.backoffBaseMs ?? 1_000) * 2 ** (row.attempts - 1);
  await db.execute(sql`
    update webhook_deliveries set
      status = ${outcome.status},
      delivered_at = ${outcome.status === "delivered" ? sql`now()` : null},
      last_status_code = ${outcome.statusCode}, last_error = ${storableText(outcome.error)},
      next_attempt_at = now() + make_interval(secs => ${delayMs / 1000}),
      claimed_by = null, lease_expires_at = null
    where id = ${row.id} and claimed_by = ${args.owner}`);
  if (outcome.error)
    log.warn({ delivery_id: row.id, batch_id: row.batch_id, attempt: row.attempts, status: outcome.status, err: outcome.error }, "webhook delivery failed");
  return outcome;
}

/** Claims up to `limit` due deliveries (fairly) and attempts them all. Returns how many were attempted. */
export async function deliverDueWebhooks(
  db: Db,
  args: { owner: string; config: FlotillaConfig; limit?: number; perUser?: number; backoffBaseMs?: number },
): Promise<number> {
  const rows = await claimDeliveries(db, { owner: args.owner, limit: args.limit ?? 10, perUser: args.perUser });
  await Promise.all(rows.map((row) => deliverClaimed(db, row, args)));
  return rows.length;
}
