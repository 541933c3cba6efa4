import "server-only";
import type { AuthOptions } from "next-auth";
import CredentialsProvider from "next-auth/providers/credentials";
import { getDatabase } from "@/server/db/client";
import { log } from "@/server/log";
import { clientAddress } from "@/server/net/client-address";
import { limitSignIn, RateLimitedError } from "./limits";
import { authSecret } from "./secret";
import { createSession, endSession } from "./sessions";
import { verifyCredentials } from "./users";

export { authSecret };

declare module "next-auth" {
  interface Session {
    user: { id: string; email: string };
  }
  interface User {
    sid?: string;
    sv?: number;
  }
}

export const SESSION_MAX_AGE_SECONDS = 30 * 24 * 60 * 60;

/** What a locked-out sign-in reports to the form: `rate_limited:<LockScope>:<ISO time the lock lifts>`. */
export const RATE_LIMITED_PREFIX = "rate_limited:";

/**
 * Where next-auth may send the browser (after sign-out, or a sign-in with a callback URL):
 * a path of this app, or a full URL on its own origin; anything else becomes the origin.
 * The origin is NEXTAUTH_URL's when set; else the request's own, so a person who came
 * through 127.0.0.1, a LAN name or a proxy lands back there, not on localhost:3000.
 */
export function redirectWithin(origin: string, url: string): string {
  if (url.startsWith("/") && !url.startsWith("//")) return `${origin}${url}`;
  try {
    if (new URL(url).origin === origin) return url;
  } catch {
    // not a URL: go home
  }
  return origin;
}

/** The origin a request was made to: the proxy's forwarded host and scheme when present, else its Host. */
export function requestOrigin(req: Request): string {
  const url = new URL(req.url);
  const host = req.headers.get("x-forwarded-host")?.split(",")[0]?.trim() || req.headers.get("host") || url.host;
  const proto = req.headers.get("x-forwarded-proto")?.split(",")[0]?.trim() || url.protocol.replace(/:$/, "");
  return `${proto === "https" ? "https" : "http"}://${host}`;
}

/** The options for one request of the next-auth route: redirects stay on that request's origin. */
export function authOptionsFor(req: Request): AuthOptions {
  const configured = process.env.NEXTAUTH_URL;
  let origin = requestOrigin(req);
  if (configured) {
    try {
      origin = new URL(configured).origin;
    } catch {
      // a malformed NEXTAUTH_URL is next-auth's own warning; keep the request's origin
    }
  }
  return { ...authOptions, callbacks: { ...authOptions.callbacks, redirect: ({ url }) => redirectWithin(origin, url) } };
}

export const authOptions: AuthOptions = {
  secret: authSecret(),
  session: { strategy: "jwt", maxAge: SESSION_MAX_AGE_SECONDS },
  pages: { signIn: "/signin" },
  providers: [
    CredentialsProvider({
      name: "Email and password",
      credentials: {
        email: { label: "Email", type: "email" },
        password: { label: "Password", type: "password" },
      },
      async authorize(credentials, req) {
        const database = getDatabase();
        const headers = (req?.headers ?? {}) as Record<string, string | undefined>;
        let user: { id: string; email: string } | null;
        try {
          user = await limitSignIn(database.sql, { email: credentials?.email, address: clientAddress(headers) }, () =>
            verifyCredentials(database.db, { email: credentials?.email, password: credentials?.password }),
          );
        } catch (err) {
          if (!(err instanceof RateLimitedError)) throw err;
          log.info({ event: "sign_in_rate_limited" }, err.message);
          // next-auth hands a thrown message to the form as `error`.
          throw new Error(`${RATE_LIMITED_PREFIX}${err.scope ?? "email"}:${err.retryAt.toISOString()}`);
        }
        if (!user) {
          log.info({ event: "sign_in_failed" }, "sign-in rejected");
          return null;
        }
        const session = await createSession(database.db, {
          userId: user.id,
          userAgent: headers["user-agent"],
          maxAgeSeconds: SESSION_MAX_AGE_SECONDS,
        });
        return { id: user.id, email: user.email, sid: session.id, sv: session.version };
      },
    }),
  ],
  callbacks: {
    jwt({ token, user }) {
      // `sub` carries the user id; set explicitly so it never depends on provider defaults.
      if (user) {
        token.sub = user.id;
        token.email = user.email;
        token.sid = user.sid;
        token.sv = user.sv;
      }
      return token;
    },
    session({ session, token }) {
      session.user = { id: token.sub ?? "", email: token.email ?? "" };
      return session;
    },
  },
  logger: {
    // Without NEXTAUTH_URL, redirects follow each request's origin (authOptionsFor): not a fault.
    warn(code) {
      if (code !== "NEXTAUTH_URL") log.warn({ event: "next_auth_warning", code }, `next-auth warning ${code}`);
    },
    error(code, metadata) {
      log.error({ event: "next_auth_error", code, metadata }, `next-auth error ${code}`);
    },
    debug() {},
  },
  events: {
    async signOut({ token }) {
      await endSession(getDatabase().db, token?.sid);
    },
  },
};
