/**
 * Only same-origin paths are followed after sign-in (no open redirects). The value is resolved
 * the way a browser would resolve it against our origin, after the decoding a browser applies:
 * browsers drop tabs and newlines and treat `\` as `/`, so `/%09/evil.com` or `/\evil` would
 * otherwise become protocol-relative (`//evil.com`) and leave the site.
 */
const BASE = "http://flotilla.invalid";

export function safeCallbackUrl(value: string | string[] | undefined): string {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v || v.length > 2000) return "/";
  let decoded = v;
  // Undo up to a few layers of percent-encoding so encoded separators are judged too.
  for (let i = 0; i < 3; i++) {
    try {
      const next = decodeURIComponent(decoded);
      if (next === decoded) break;
      decoded = next;
    } catch {
      return "/";
    }
  }
  // Control characters and whitespace (tab, newline, NUL …) have no place in a path we redirect to.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
  if (/[\u0000-\u001f\u007f\s\\]/.test(decoded) || /[\u0000-\u001f\u007f\s\\]/.test(v)) return "/";
  if (!decoded.startsWith("/") || decoded.startsWith("//")) return "/";
  let url: URL;
  try {
    url = new URL(v, BASE);
  } catch {
    return "/";
  }
  if (url.origin !== BASE) return "/";
  return `${url.pathname}${url.search}${url.hash}`;
}
