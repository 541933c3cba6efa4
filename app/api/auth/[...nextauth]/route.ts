import { NextRequest } from "next/server";
import NextAuth from "next-auth";
import { authOptionsFor } from "@/server/auth/options";
import { withHashAdmission } from "@/server/auth/password";
import { errorResponse, readBodyText } from "@/server/http/route";
import { AppError } from "@/server/errors";

/** next-auth for this request: its redirects stay on the origin the person came through. */
const handler = (req: NextRequest, ctx: Ctx) => NextAuth(req, ctx, authOptionsFor(req));

/** Sign-in forms are a few hundred bytes; nothing larger is read into memory. */
const AUTH_BODY_LIMIT = 8 * 1024;

type Ctx = { params: Promise<{ nextauth: string[] }> };

async function POST(req: NextRequest, ctx: Ctx): Promise<Response> {
  let body: string;
  try {
    body = await readBodyText(req, AUTH_BODY_LIMIT);
  } catch (err) {
    if (err instanceof AppError) return errorResponse(err);
    throw err;
  }
  // next-auth reads the body itself: hand it a request carrying the bytes already read.
  const forward = () => handler(new NextRequest(req.url, { method: "POST", headers: req.headers, body }), ctx);
  if (!req.nextUrl.pathname.endsWith("/callback/credentials")) return forward();
  // A password check: 429 busy at once, before any limit is counted, when too many are in flight.
  try {
    return await withHashAdmission(forward);
  } catch (err) {
    if (err instanceof AppError) return errorResponse(err);
    throw err;
  }
}

export { handler as GET, POST };
