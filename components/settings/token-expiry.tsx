/** The token form's expiry choices; "never" is allowed because the Settings page is a browser session. */
export const EXPIRY_CHOICES = [
  { value: "7", label: "7 days" },
  { value: "30", label: "30 days" },
  { value: "90", label: "90 days" },
  { value: "365", label: "1 year" },
  { value: "never", label: "Never" },
] as const;
export const DEFAULT_EXPIRY = "90";

/** The API body field for a choice: a number of days, or null for a token that never expires. */
export function expiresInDays(choice: string): number | null {
  return choice === "never" ? null : Number(choice);
}

const DAY = 86_400_000;

/** "in 3 days", "in 5 hours", "2 days ago": coarse on purpose, the exact time is in the title. */
export function relativeTime(iso: string, now = Date.now()): string {
  const ms = new Date(iso).getTime() - now;
  const abs = Math.abs(ms);
  const format = new Intl.RelativeTimeFormat("en", { numeric: "auto" });
  if (abs >= DAY) return format.format(Math.round(ms / DAY), "day");
  if (abs >= 3_600_000) return format.format(Math.round(ms / 3_600_000), "hour");
  return format.format(Math.round(ms / 60_000), "minute");
}

/** A token's expiry in the token list: "expires in 89 days", "never expires", or an Expired badge. */
export function TokenExpiry({ expiresAt, expired }: { expiresAt: string | null; expired: boolean }) {
  if (!expiresAt) return <span className="text-amber-700">never expires</span>;
  const exact = `${new Date(expiresAt).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short", timeZone: "UTC" })} UTC`;
  // Relative to the clock of whoever renders it: server and browser may differ by a minute.
  return (
    <time dateTime={expiresAt} title={exact} suppressHydrationWarning className={expired ? "text-red-700" : undefined}>
      {expired ? `expired ${relativeTime(expiresAt)}` : `expires ${relativeTime(expiresAt)}`}
    </time>
  );
}

