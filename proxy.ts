import { type NextRequest, NextResponse } from "next/server";
import { getToken } from "next-auth/jwt";
import { authSecret } from "@/server/auth/secret";

/**
 * Signed-out page requests go to /signin (with the page to come back to). API routes (/api/ and
 * the compatible batch APIs under /v1/) are not matched: they answer 401 JSON themselves. This is an optimistic check; pages and routes
 * still authenticate every request against the database.
 */
const PUBLIC_PAGES = new Set(["/signin", "/register"]);

export async function proxy(req: NextRequest) {
  const { pathname, search } = req.nextUrl;
  if (PUBLIC_PAGES.has(pathname)) return NextResponse.next();
  const secret = authSecret();
  const token = secret ? await getToken({ req, secret }) : null;
  if (token?.sub) return NextResponse.next();
  const url = req.nextUrl.clone();
  url.pathname = "/signin";
  url.search = "";
  if (pathname !== "/") url.searchParams.set("callbackUrl", `${pathname}${search}`);
  return NextResponse.redirect(url);
}

export const config = {
  matcher: ["/((?!api/|v1/|_next/static|_next/image|favicon\\.ico|robots\\.txt|.*\\.(?:png|svg|jpg|jpeg|gif|webp|ico|css|js|map|txt)$).*)"],
};
