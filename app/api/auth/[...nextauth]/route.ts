import { NextRequest } from "next/server";
import NextAuth from "next-auth";
import { authOptions } from "@/server/auth/options";
import { errorResponse, readBodyText } from "@/server/http/route";
import { AppError } from "@/server/errors";

const handler = NextAuth(authOptions);

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
  return handler(new NextRequest(req.url, { method: "POST", headers: req.headers, body }), ctx);
}

export { handler as GET, POST };
