import type { AuthOptions } from "next-auth";
import CredentialsProvider from "next-auth/providers/credentials";
import { getDatabase } from "@/server/db/client";
import { log } from "@/server/log";
import { clientAddress, limitSignIn, RateLimitedError } from "./limits";
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

/** What a locked-out sign-in reports to the form: `rate_limited:<ISO time the lock lifts>`. */
export const RATE_LIMITED_PREFIX = "rate_limited:";

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
          throw new Error(`${RATE_LIMITED_PREFIX}${err.retryAt.toISOString()}`);
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
  events: {
    async signOut({ token }) {
      await endSession(getDatabase().db, token?.sid);
    },
  },
};
