/** Browsers and tools that ask for /favicon.ico get the app icon (app/icon.svg) instead of a 404. */
export function GET(req: Request): Response {
  return Response.redirect(new URL("/icon.svg", req.url), 308);
}
