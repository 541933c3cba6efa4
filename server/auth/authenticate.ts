import "server-only";
import { eq } from "drizzle-orm";
import { getToken } from "next-auth/jwt";
import type { Db } from "@/server/db/client";
import { getDatabase } from "@/server/db/client";
import { users } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { authSecret } from "./secret";
import { userIdForToken } from "./tokens";
import { sessionIsLive } from "./sessions";

/**
 * Who is calling: the next-auth session cookie (browsers) or `Authorization: Bearer flt_...`
 * (scripts). A request that presents a bearer token is judged by the token alone.
 */
export interface AuthOptions {
  db?: Db;
}

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

function parseCookies(header: string | null): Record<string, string> {
  const out: Record<string, string> = {};
  if (!header) return out;
  for (const pair of header.split(";")) {
    const eq = pair.indexOf("=");
    if (eq < 0) continue;
    const name = pair.slice(0, eq).trim();
    const raw = pair.slice(eq + 1).trim();
    if (!name) continue;
    try {
      out[name] = decodeURIComponent(raw);
    } catch {
      out[name] = raw;
    }
  }
  return out;
}

function allowedHosts(req: Request): Set<string> {
  const hosts = new Set<string>();
  const add = (value: string | null | undefined) => value && hosts.add(value.toLowerCase());
  add(req.headers.get("host"));
  add(req.headers.get("x-forwarded-host")?.split(",")[0]?.trim());
  try {
    add(new URL(req.url).host);
  } catch {
    // relative URL in odd test harnesses: headers above still apply
  }
  if (process.env.NEXTAUTH_URL) {
    try {
      add(new URL(process.env.NEXTAUTH_URL).host);
    } catch {
      // ignored: a bad NEXTAUTH_URL only narrows what is accepted
    }
  }
  return hosts;
}

/**
 * Cookies ride along with cross-site requests; a state-changing request authenticated by
 * cookie must come from our own origin (CSRF). Bearer requests carry no ambient authority.
 */
function assertSameOrigin(req: Request): void {
  if (SAFE_METHODS.has(req.method.toUpperCase())) return;
  if (req.headers.get("sec-fetch-site") === "cross-site") throw new AppError("forbidden", "cross-site request rejected");
  const origin = req.headers.get("origin");
  if (!origin) return;
  let host: string;
  try {
    host = new URL(origin).host.toLowerCase();
  } catch {
    throw new AppError("forbidden", "cross-site request rejected");
  }
  if (!allowedHosts(req).has(host)) throw new AppError("forbidden", "cross-site request rejected");
}

/** The caller, or null when unauthenticated. Throws AppError forbidden for a cross-site cookie mutation. */
export interface Caller {
  userId: string;
  /** The browser session, when authenticated by cookie. */
  sessionId?: string;
}

export async function authenticate(req: Request, options: AuthOptions = {}): Promise<Caller | null> {
  const authorization = req.headers.get("authorization");
  if (authorization !== null) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (!match) return null;
    const db = options.db ?? getDatabase().db;
    const userId = await userIdForToken(db, match[1]);
    return userId ? { userId } : null;
  }

  const cookies = parseCookies(req.headers.get("cookie"));
  if (!Object.keys(cookies).some((name) => name.includes("next-auth.session-token"))) return null;
  const secret = authSecret();
  if (!secret) return null;
  const secureCookie = Object.keys(cookies).some((name) => name.startsWith("__Secure-next-auth.session-token"));
  // getToken reads `cookies` as a plain record; a Fetch Request has none, so hand it the parsed header.
  const token = await getToken({
    req: { headers: new Headers(), cookies } as unknown as Parameters<typeof getToken>[0]["req"],
    secret,
    secureCookie,
  });
  const userId = typeof token?.sub === "string" ? token.sub : null;
  if (!userId) return null;
  assertSameOrigin(req);
  // The JWT alone is not enough: its session must still exist (not signed out), at the user's
  // current session version (not signed out everywhere), for an account that still exists.
  const db = options.db ?? getDatabase().db;
  if (!(await sessionIsLive(db, { userId, sessionId: token?.sid, version: token?.sv }))) return null;
  return { userId, sessionId: token?.sid as string };
}

/** The caller or AppError unauthorized (401). */
export async function requireUser(req: Request, options: AuthOptions = {}): Promise<Caller> {
  const user = await authenticate(req, options);
  if (!user) throw new AppError("unauthorized", "sign in or send Authorization: Bearer <token>");
  return user;
}

/** The caller when they are the deployment's admin; 401 signed out, 403 for anyone else. */
export async function requireAdmin(req: Request, options: AuthOptions = {}): Promise<Caller> {
  const caller = await requireUser(req, options);
  const db = options.db ?? getDatabase().db;
  const [row] = await db.select({ isAdmin: users.isAdmin }).from(users).where(eq(users.id, caller.userId)).limit(1);
  if (!row?.isAdmin) throw new AppError("forbidden", "this is for the admin of this deployment");
  return caller;
}
