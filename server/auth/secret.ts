import "server-only";
/**
 * The next-auth JWT secret: NEXTAUTH_SECRET (npm start generates and persists one under the
 * data folder), AUTH_SECRET, or a fixed value outside production only. Dependency-free so the
 * proxy can import it.
 */
const DEV_SECRET = "flotilla-development-secret-not-for-production";

export function authSecret(): string | undefined {
  const configured = process.env.NEXTAUTH_SECRET ?? process.env.AUTH_SECRET;
  if (configured) return configured;
  return process.env.NODE_ENV === "production" ? undefined : DEV_SECRET;
}
