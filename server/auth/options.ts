import type { AuthOptions } from "next-auth";
import CredentialsProvider from "next-auth/providers/credentials";
import { getDatabase } from "@/server/db/client";
import { log } from "@/server/log";
import { authSecret } from "./secret";
import { verifyCredentials } from "./users";

export { authSecret };

declare module "next-auth" {
  interface Session {
    user: { id: string; email: string };
  }
}

export const SESSION_MAX_AGE_SECONDS = 30 * 24 * 60 * 60;

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
      async authorize(credentials) {
        const user = await verifyCredentials(getDatabase().db, {
          email: credentials?.email,
          password: credentials?.password,
        });
        if (!user) log.info({ event: "sign_in_failed" }, "sign-in rejected");
        return user ? { id: user.id, email: user.email } : null;
      },
    }),
  ],
  callbacks: {
    jwt({ token, user }) {
      // `sub` carries the user id; set explicitly so it never depends on provider defaults.
      if (user) {
        token.sub = user.id;
        token.email = user.email;
      }
      return token;
    },
    session({ session, token }) {
      session.user = { id: token.sub ?? "", email: token.email ?? "" };
      return session;
    },
  },
};
