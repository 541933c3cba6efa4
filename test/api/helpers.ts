import { sql } from "drizzle-orm";
import { encode } from "next-auth/jwt";
import { afterAll } from "vitest";
import { authSecret } from "@/server/auth/options";
import { createSession } from "@/server/auth/sessions";
import { createApiToken } from "@/server/auth/tokens";
import { createUser } from "@/server/auth/users";
import { createThread } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { writeHeartbeat } from "@/server/runtime/heartbeat";
import { dispatch, preloadRoutes } from "../helpers/app-routes";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/**
 * Route-level harness: a fresh migrated database per suite, the route handlers' own
 * getDatabase() pointed at it, and the app's route table (test/helpers/app-routes.ts) so tests
 * read like HTTP calls while calling the exported handlers with real Request objects.
 */

export const ORIGIN = "http://flotilla.test";

// The batch routes load with this module, as they always have: a suite's first call is not a cold import.
await preloadRoutes(["/api/threads/[threadId]/subagent-batches", "/api/features"]);

export async function setupApiDatabase(): Promise<TestDatabase> {
  const tdb = await createTestDatabase();
  // The handlers resolve their pool lazily on first request; point it at this suite's database.
  process.env.DATABASE_URL = tdb.url;
  afterAll(async () => {
    await getDatabase().close();
  });
  return tdb;
}

export interface CallOptions {
  token?: string;
  cookie?: string;
  body?: BodyInit;
  /** JSON-encoded and sent as application/json unless contentType says otherwise. */
  json?: unknown;
  contentType?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/** Dispatches like Next's router would (test/helpers/app-routes.ts): the path selects the handler and its params. */
export async function call(method: string, path: string, options: CallOptions = {}): Promise<Response> {
  return dispatch(buildRequest(method, new URL(path, ORIGIN), options));
}

export function buildRequest(method: string, url: URL, options: CallOptions = {}): Request {
  const headers = new Headers(options.headers);
  headers.set("host", url.host);
  if (options.token) headers.set("authorization", `Bearer ${options.token}`);
  if (options.cookie) headers.set("cookie", options.cookie);
  let body = options.body;
  if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    headers.set("content-type", "application/json");
  }
  if (options.contentType) headers.set("content-type", options.contentType);
  const init: RequestInit & { duplex?: "half" } = { method, headers, signal: options.signal };
  if (body !== undefined) {
    init.body = body;
    if (body instanceof ReadableStream) init.duplex = "half";
  }
  return new Request(url, init);
}

export async function errorOf(res: Response): Promise<{ code: string; message: string }> {
  const body = (await res.json()) as { error?: { code?: unknown; message?: unknown } };
  if (typeof body.error?.code !== "string" || typeof body.error?.message !== "string")
    throw new Error(`not an error body: ${JSON.stringify(body)}`);
  return body.error as { code: string; message: string };
}

export interface TestUser {
  userId: string;
  email: string;
  token: string;
  cookie: string;
}

let userSeq = 0;
export async function makeUser(tdb: TestDatabase, label = "user"): Promise<TestUser> {
  const email = `${label}-${++userSeq}-${Date.now()}@example.test`;
  const user = await createUser(tdb.db, { email, password: "correct horse battery" });
  const token = await createApiToken(tdb.db, { userId: user.id });
  return { userId: user.id, email, token, cookie: await sessionCookie(user.id, email) };
}

/** A next-auth session cookie exactly as the sign-in flow would set it. */
export async function sessionCookie(userId: string, email: string): Promise<string> {
  const secret = authSecret();
  if (!secret) throw new Error("no auth secret");
  const session = await createSession(getDatabase().db, { userId, maxAgeSeconds: 3600 });
  const jwt = await encode({ token: { sub: userId, email, sid: session.id, sv: session.version }, secret, maxAge: 3600 });
  return `next-auth.session-token=${jwt}`;
}

export async function makeThread(tdb: TestDatabase, user: TestUser): Promise<string> {
  return (await createThread(tdb.db, { userId: user.userId, title: "batches" })).id;
}

export const WORKER_ID = "test-worker";

export async function workerAlive(tdb: TestDatabase): Promise<void> {
  await writeHeartbeat(tdb.db, { id: WORKER_ID, capacity: 4, running: 0 });
}

export async function noWorker(tdb: TestDatabase): Promise<void> {
  await tdb.db.execute(sql`delete from worker_heartbeats`);
}

/** Row counts of every table a batch route could write to. */
export async function rowCounts(tdb: TestDatabase): Promise<Record<string, number>> {
  const [row] = await tdb.sql<Record<string, number>[]>`
    select (select count(*)::int from subagent_batches) as batches,
           (select count(*)::int from subagent_batch_items) as items,
           (select count(*)::int from subagent_batch_item_attempts) as attempts,
           (select coalesce(sum(xmin::text::bigint), 0)::float8 from subagent_batches) as batch_versions,
           (select coalesce(sum(xmin::text::bigint), 0)::float8 from subagent_batch_items) as item_versions
  `;
  return row!;
}

/**
 * Moves items straight to an end state with plain SQL. The counters trigger keeps the batch's
 * counts, usage and terminal status consistent, exactly as for a worker's own writes.
 */
export async function finishItems(
  tdb: TestDatabase,
  batchId: string,
  positions: number[],
  outcome: { status: "succeeded"; result: string } | { status: "failed"; error: string } | { status: "running" },
): Promise<void> {
  const result = outcome.status === "succeeded" ? outcome.result : null;
  const error = outcome.status === "failed" ? outcome.error : null;
  const terminal = outcome.status !== "running";
  await tdb.sql`
    update subagent_batch_items
       set status = ${outcome.status}, result = ${result}, preview = left(${result}::text, 2000), error = ${error},
           attempts = greatest(attempts, 1), input_tokens = 10, output_tokens = ${result ? result.length : 0},
           lease_owner = ${terminal ? null : WORKER_ID},
           lease_expires_at = ${terminal ? null : tdb.sql`now() + interval '1 hour'`},
           started_at = coalesce(started_at, now()), finished_at = ${terminal ? tdb.sql`now()` : null}, updated_at = now()
     where batch_id = ${batchId} and position in ${tdb.sql(positions)}
  `;
}

export async function itemIdAt(tdb: TestDatabase, batchId: string, position: number): Promise<string> {
  const [row] = await tdb.sql<{ id: string }[]>`
    select id from subagent_batch_items where batch_id = ${batchId} and position = ${position}`;
  return row!.id;
}
