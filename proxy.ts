import { type NextRequest, NextResponse } from "next/server";
import { getToken } from "next-auth/jwt";
import { authSecret } from "@/server/auth/secret";

/**
 * Every page request: a Content-Security-Policy with a fresh nonce (Next puts it on its own
 * scripts, so no inline script runs without it), then the optimistic sign-in check: signed-out
 * page requests go to /signin (with the page to come back to). API routes (/api/, the
 * compatible batch APIs under /v1/ and the MCP server at /mcp) are not matched: they
 * answer 401 JSON themselves and get their static headers from next.config.ts. Pages and routes
 * still authenticate every request against the database.
 */
const PUBLIC_PAGES = new Set(["/signin", "/register"]);

export function contentSecurityPolicy(nonce: string, dev = process.env.NODE_ENV !== "production"): string {
  return [
    "default-src 'self'",
    // 'strict-dynamic': scripts loaded by a nonced script may run; nothing inline without the nonce.
    `script-src 'self' 'nonce-${nonce}' 'strict-dynamic'${dev ? " 'unsafe-eval'" : ""}`,
    // React and Next set style attributes at run time.
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join("; ");
}

export async function proxy(req: NextRequest) {
  const nonce = btoa(crypto.randomUUID());
  const csp = contentSecurityPolicy(nonce);
  const { pathname, search } = req.nextUrl;
  let res: NextResponse;
  const secret = authSecret();
  if (PUBLIC_PAGES.has(pathname) || (secret && (await getToken({ req, secret }))?.sub)) {
    const headers = new Headers(req.headers);
    headers.set("x-nonce", nonce);
    headers.set("content-security-policy", csp);
    res = NextResponse.next({ request: { headers } });
  } else {
    const url = req.nextUrl.clone();
    url.pathname = "/signin";
    url.search = "";
    if (pathname !== "/") url.searchParams.set("callbackUrl", `${pathname}${search}`);
    res = NextResponse.redirect(url);
  }
  res.headers.set("content-security-policy", csp);
  return res;
}

export const config = {
  matcher: ["/((?!api/|v1/|mcp(?:/|$)|_next/static|_next/image|favicon\\.ico|robots\\.txt|.*\\.(?:png|svg|jpg|jpeg|gif|webp|ico|css|js|map|txt)$).*)"],
};
