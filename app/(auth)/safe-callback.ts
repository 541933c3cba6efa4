/** Only same-site relative paths are followed after sign-in (no open redirects). */
export function safeCallbackUrl(value: string | string[] | undefined): string {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v?.startsWith("/") || v.startsWith("//") || v.startsWith("/\\")) return "/";
  return v;
}
