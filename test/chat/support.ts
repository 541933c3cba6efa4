import { encode } from "next-auth/jwt";
import { createSession } from "@/server/auth/sessions";
import { createUser } from "@/server/auth/users";
import { type Db, getDatabase } from "@/server/db/client";

/** Shared by the auth and chat suites: environment, users and session cookies for direct route calls. */
export const TEST_SECRET = "test-secret-for-flotilla-suites-0123456789";
export const ORIGIN = "http://localhost:3000";

/** Points the web singletons (getDatabase, getConfig, authSecret) at this suite's database. Call before any route import runs. */
export function useSuiteEnv(databaseUrl: string, extra: Record<string, string> = {}): void {
  process.env.DATABASE_URL = databaseUrl;
  process.env.NEXTAUTH_SECRET = TEST_SECRET;
  process.env.NEXTAUTH_URL = ORIGIN;
  for (const [k, v] of Object.entries(extra)) process.env[k] = v;
}

let counter = 0;
export function uniqueEmail(prefix = "user"): string {
  counter += 1;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${counter}@example.com`;
}

export async function makeUser(db: Db, prefix = "user"): Promise<{ id: string; email: string; password: string }> {
  const email = uniqueEmail(prefix);
  const password = "correct horse battery";
  const user = await createUser(db, { email, password });
  return { id: user.id, email: user.email, password };
}

/** A next-auth v4 session cookie exactly as the credentials sign-in issues it. */
export async function sessionCookie(user: { id: string; email: string }, secret = TEST_SECRET): Promise<string> {
  const session = await createSession(getDatabase().db, { userId: user.id, maxAgeSeconds: 3600 });
  const jwt = await encode({ token: { sub: user.id, email: user.email, sid: session.id, sv: session.version }, secret });
  return `next-auth.session-token=${jwt}`;
}

export function request(
  path: string,
  init: { method?: string; cookie?: string; bearer?: string; body?: unknown; rawBody?: string; headers?: Record<string, string>; signal?: AbortSignal } = {},
): Request {
  const headers = new Headers(init.headers);
  headers.set("host", "localhost:3000");
  if (init.cookie) headers.set("cookie", init.cookie);
  if (init.bearer) headers.set("authorization", `Bearer ${init.bearer}`);
  let body: string | undefined = init.rawBody;
  if (init.body !== undefined) body = JSON.stringify(init.body);
  if (body !== undefined && !headers.has("content-type")) headers.set("content-type", "application/json");
  const method = init.method ?? (body !== undefined ? "POST" : "GET");
  if (method !== "GET" && !headers.has("origin")) headers.set("origin", ORIGIN);
  return new Request(`${ORIGIN}${path}`, { method, headers, body, signal: init.signal });
}

export const params = <T extends Record<string, string>>(p: T) => ({ params: Promise.resolve(p) });

/** Parses an AI SDK UI message stream (SSE) body into its JSON chunks. */
export async function readUIChunks(res: Response): Promise<Array<Record<string, unknown>>> {
  const text = await res.text();
  return text
    .split("\n")
    .filter((line) => line.startsWith("data: ") && line !== "data: [DONE]")
    .map((line) => JSON.parse(line.slice(6)));
}
